package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// closable is a third-party plugin stand-in: the real fixed-window
// algorithm, counting its Close calls. The loader is what is under test.
type closable struct {
	sdk.Algorithm
	closed *atomic.Int32
}

func (c closable) Close(context.Context) error { c.closed.Add(1); return nil }

func TestThirdPartyPluginsLoadReuseAndRelease(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var loads, closed atomic.Int32
	loader := func(_ context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		if strings.HasSuffix(d.Wasm, "broken.wasm") {
			return nil, errors.New("not a Wasm module")
		}
		loads.Add(1)
		return closable{fixedwindow.New(), &closed}, nil
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: time.Second}),
		Plugins: builtin.All(), LoadPlugin: loader})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const uses = `plugins:
  mine: {wasm: mine.wasm}
rules:
  - name: third
    subject: request.ip
    plugin: mine
    config: {limit: 2, window: 1h}
`
	write(uses)
	if _, err := e.Load(path); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		check(e, "192.0.2.5")
	}
	keys, _ := srv.Client().Keys(context.Background(), "ruled:mine:third:*").Result()
	if len(keys) == 0 {
		t.Fatal("the third-party plugin's keys are not in its own namespace")
	}
	if res := check(e, "192.0.2.5"); res.Allowed || res.Results[0].Plugin != "mine" {
		t.Fatalf("third-party decision %+v", res.Results)
	}
	// Reloading the same declaration reuses the loaded plugin.
	if _, err := e.Load(path); err != nil || loads.Load() != 1 || closed.Load() != 0 {
		t.Fatalf("reload: err %v, loads %d, closed %d", err, loads.Load(), closed.Load())
	}
	// A broken plugin: positioned error, the old set keeps serving.
	write(strings.Replace(uses, "mine.wasm", "broken.wasm", 1))
	_, err = e.Load(path)
	var list rules.ErrorList
	if !errors.As(err, &list) || !strings.Contains(err.Error(), "rules.yaml:2:") || !strings.Contains(err.Error(), "not a Wasm module") {
		t.Fatalf("broken plugin: %v", err)
	}
	if res := check(e, "192.0.2.6"); len(res.Results) != 1 || res.Results[0].Plugin != "mine" || res.Results[0].Degraded != "" {
		t.Fatalf("old set not serving: %+v", res.Results)
	}
	// A built-in's name cannot be taken.
	write("plugins:\n  fixedwindow: {wasm: x.wasm}\nrules: []\n")
	if _, err := e.Load(path); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("built-in name: %v", err)
	}
	// No rule uses it any more: released after the swap.
	write("rules: []\n")
	if _, err := e.Load(path); err != nil {
		t.Fatal(err)
	}
	if closed.Load() != 1 {
		t.Fatalf("closed %d times, want 1", closed.Load())
	}
}
