// Command faulty is a Wasm test plugin whose scripts misbehave in Redis,
// for the fault matrix: its config's "mode" picks the script Decide runs.
//   - spin: loops for ever without writing (the watchdog kills it);
//   - writespin: writes, then loops for ever (Redis cannot kill it);
//   - huge: returns a 1 MiB string (over the reply cap);
//   - ok:   answers like a limiter that always allows.
package main

import (
	"context"
	"time"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(faulty{}) }

func main() {}

type faulty struct{}

type config struct{ mode string }

func (faulty) Info() sdk.Info {
	return sdk.Info{Name: "faulty", Version: "0.0.1", Scripts: []sdk.Script{
		{Name: "ok", Source: "return {1, 1, 10, 9, 1000000, 0}"},
		{Name: "spin", Source: "while true do end"},
		{Name: "writespin", Source: "redis.call('SET', KEYS[1], 1) while true do end", Commands: []string{"set"}},
		{Name: "huge", Source: "return string.rep('x', 1048576)"},
	}}
}

func (faulty) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	mode := r.String("mode", "ok")
	if err := r.Done(); err != nil {
		return nil, err
	}
	return config{mode: mode}, nil
}

func (faulty) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	reply, err := h.Eval(ctx, c.(config).mode, []string{"k"})
	if err != nil {
		return sdk.Decision{}, err
	}
	return sdk.DecisionFromReply(reply, time.Second)
}
