package httpapi_test

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestOpenAPIPathsAreServed reads docs/openapi.yaml and calls every path
// with every method it documents on a real server: none may be unknown
// (404) or refuse the method (405).
func TestOpenAPIPathsAreServed(t *testing.T) {
	data, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		OpenAPI string `yaml:"openapi"`
		Info    struct {
			Title, Version string
		} `yaml:"info"`
		Paths      map[string]map[string]any `yaml:"paths"`
		Components map[string]any            `yaml:"components"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docs/openapi.yaml: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") || doc.Info.Title == "" || len(doc.Paths) == 0 {
		t.Fatalf("not an OpenAPI 3 document: openapi %q, title %q, %d paths", doc.OpenAPI, doc.Info.Title, len(doc.Paths))
	}
	f := newFixture(t, "tok")
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	ops := 0
	for path, item := range doc.Paths {
		url := strings.ReplaceAll(path, "{path}", "orders/7")
		for method, op := range item {
			if !slices.Contains(methods, method) {
				continue // parameters, summary, ...
			}
			if m, ok := op.(map[string]any); !ok || m["responses"] == nil {
				t.Errorf("%s %s: no responses", method, path)
			}
			body := ""
			if method == "post" {
				body = "{}"
			}
			resp, _ := f.do(t, strings.ToUpper(method), url, "tok", body, nil)
			if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
				t.Errorf("%s %s (documented): %d", strings.ToUpper(method), url, resp.StatusCode)
			}
			ops++
		}
	}
	if ops < 12 {
		t.Fatalf("only %d operations documented", ops)
	}
	// And the reverse for a few: what is not documented is not served.
	if resp, _ := f.do(t, "GET", "/v1/check", "", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/check: %d, want 405", resp.StatusCode)
	}
}
