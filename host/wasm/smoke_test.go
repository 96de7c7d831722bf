package wasm_test

import (
	"context"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/plugintest"
)

func TestSmoke(t *testing.T) {
	ctx := context.Background()
	t0 := time.Now()
	if err := wasm.Build(ctx, "../../plugins/fixedwindow/wasm", "/tmp/smoke/fw.wasm"); err != nil {
		t.Fatal(err)
	}
	t.Log("build", time.Since(t0))
	t0 = time.Now()
	p, err := wasm.Load(ctx, "/tmp/smoke/fw.wasm", wasm.Options{CacheDir: "/tmp/smoke/cache"})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("load", time.Since(t0), p.Info().Name, p.Stats())
	defer p.Close(ctx)
	env := plugintest.NewEnv(t)
	cfg, err := p.Configure(map[string]any{"limit": 3, "window": "1m"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Configure(map[string]any{"limit": 0, "windw": "1m"})
	t.Log("bad config:", err)
	reg := plugintest.Register(t, env.Capability(), p)
	for i := 0; i < 5; i++ {
		d, err := p.Decide(ctx, reg.Host("r", "s"), cfg, sdk.Request{Subject: "s", Hits: 1})
		t.Log(d, err)
	}
	t.Log(p.Stats())
}
