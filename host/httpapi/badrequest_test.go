package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// A fixed window, then the concurrency plugin, which refuses an acquire
// without a lease id as bad input.
const badInputRules = `rules:
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 10, window: 1h}
  - name: inflight
    subject: request.user
    plugin: concurrency
    config: {limit: 5, ttl: 1m}
    on_error: allow
`

// TestBadInputFromAPluginIs400 checks every interface's answer to a request
// a plugin refuses as bad input: 400 invalid_request naming the rule, not
// the rule's on_error: allow, and the earlier rule's unit refunded.
func TestBadInputFromAPluginIs400(t *testing.T) {
	e, _ := newTestEngine(t, redistest.Start(t), 2*time.Second, badInputRules, builtin.All())
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases()}))
	t.Cleanup(srv.Close)

	post := func(path, body string) (int, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var answer struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	code, body := post("/v1/check", `{"request": {"user": "u"}}`)
	if err := json.Unmarshal([]byte(body), &answer); err != nil || code != http.StatusBadRequest ||
		answer.Error.Code != "invalid_request" || !strings.Contains(answer.Error.Message, "rule inflight (plugin concurrency)") ||
		!strings.Contains(answer.Error.Message, "must name the slot") {
		t.Fatalf("check: %d %s", code, body)
	}
	code, body = post("/v1/check/batch", `{"checks": [{"request": {"user": "u"}}, {"request": {"user": "u"}, "dedup_id": "a"}]}`)
	var batch struct {
		Results []struct {
			Allowed bool                   `json:"allowed"`
			Error   *struct{ Code string } `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(body), &batch); err != nil || code != http.StatusOK || len(batch.Results) != 2 ||
		batch.Results[0].Allowed || batch.Results[0].Error == nil || batch.Results[0].Error.Code != "invalid_request" ||
		!batch.Results[1].Allowed || batch.Results[1].Error != nil {
		t.Fatalf("batch: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/auth", nil)
	req.Header.Set("X-Forwarded-User", "u")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "must name the slot") {
		t.Fatalf("forward-auth: %d %s", resp.StatusCode, b)
	}
	// Three refused requests, one admitted: the fixed window counts one.
	code, body = post("/v1/check", `{"request": {"user": "u"}, "hits": 0}`)
	if code != http.StatusOK || !strings.Contains(body, `"rule":"per-user"`) || !strings.Contains(body, `"remaining":9`) {
		t.Fatalf("peek after the refusals: %d %s", code, body)
	}
}
