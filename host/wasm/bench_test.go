package wasm_test

import (
	"testing"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// BenchmarkDecide measures one fixed-window decision natively and through
// the Wasm driver, against a stub host (the driver's own overhead) and
// against a real redis-server. The fixed window answers a template, so
// "wasm" runs no guest code per decision; "wasm-steps" and the interrupt
// variants below call the guest's ruled_step for each. docs/abi.md records
// the numbers.
func BenchmarkDecide(b *testing.B) {
	raw := map[string]any{"limit": 1 << 40, "window": "1h"}
	w := shared(b, "bench-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.Options{})
	// The guest's own step for every decision, as without templates.
	st := shared(b, "bench-steps-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.Options{NoTemplates: true})
	// The same module stepping, stopped by wazero's WithCloseOnContextDone instead of
	// instrumentation (it calls back into Go at every loop iteration), and
	// with no way to stop it at all: what interruptibility costs.
	z := shared(b, "bench-wazero-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.WazeroInterruptible(wasm.Options{NoTemplates: true}))
	u := shared(b, "bench-uninterruptible-"+fixedwindow.Name, pluginPkg(fixedwindow.Name), wasm.Uninterruptible(wasm.Options{NoTemplates: true}))
	algs := []struct {
		name string
		alg  sdk.Algorithm
	}{{"native", fixedwindow.New()}, {"wasm", w}, {"wasm-steps", st}, {"wasm-wazero-interrupt", z}, {"wasm-uninterruptible", u}}
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
