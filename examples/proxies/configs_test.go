package proxies_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"

	// The typed_config types the Envoy examples name.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

func TestExampleRulesLoad(t *testing.T) {
	cat := builtin.NewCatalog()
	for _, path := range []string{"rules.yaml", "envoy/rls-rules.yaml"} {
		if _, err := rules.Load(path, cat); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// TestEnvoyConfigsParse reads the Envoy examples as Envoy's own bootstrap
// message, with go-control-plane's types and validation rules: a misspelt
// field, a wrong enum or a missing required value fails here.
func TestEnvoyConfigsParse(t *testing.T) {
	for _, path := range []string{"envoy/ext-authz.yaml", "envoy/ratelimit.yaml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc any
		if err := yaml.Unmarshal(data, &doc); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		js, err := json.Marshal(doc)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var b bootstrapv3.Bootstrap
		if err := protojson.Unmarshal(js, &b); err != nil {
			t.Fatalf("%s is not an Envoy bootstrap: %v", path, err)
		}
		if err := b.ValidateAll(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(b.GetStaticResources().GetListeners()) != 1 || len(b.GetStaticResources().GetClusters()) != 2 {
			t.Fatalf("%s: %d listeners, %d clusters", path, len(b.GetStaticResources().GetListeners()), len(b.GetStaticResources().GetClusters()))
		}
	}
}
