package assemblyscript_test

import (
	"testing"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// BenchmarkDecide measures one fixed-window decision three ways: the native Go plugin, the same
// Go plugin compiled to Wasm (sdk/guest), and the AssemblyScript module, the last two through
// ruled's Wasm driver; each against a stub host that returns a canned reply (the driver's and
// the guest's own cost) and against a real redis-server, from one goroutine and from GOMAXPROCS
// goroutines (/parallel). Like host/wasm's benchmark it reports cpu-µs/op, the process's CPU time
// per decision, besides wall time.
func BenchmarkDecide(b *testing.B) {
	raw := map[string]any{"limit": 1 << 40, "window": "1h"}
	algs := []struct {
		name string
		alg  sdk.Algorithm
	}{
		{"native", fixedwindow.New()},
		{"wasm-go", load(b, goModule(b), wasm.Options{})},
		{"wasm-as", load(b, asModule, wasm.Options{})},
	}
	stub := &stubHost{reply: sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3600e6, 0)}
	env := plugintest.NewEnv(b)
	c := env.Capability()
	req := sdk.Request{Subject: "bench-subject", Hits: 1}
	for _, a := range algs {
		cfg := plugintest.Configure(b, a.alg, raw)
		reg := plugintest.Register(b, c, a.alg)
		for _, h := range []struct {
			name string
			host sdk.Host
		}{{"stub", stub}, {"redis", reg.Host("bench", req.Subject)}} {
			plugintest.BenchDecideOn(b, a.name+"/"+h.name, a.alg, h.host, cfg, req)
		}
	}
}
