package wasm_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/plugintest"
)

// gatedHost blocks every Eval until its gate is closed, and reports each
// call on entered: Redis taking its time.
type gatedHost struct {
	entered chan struct{}
	gate    chan struct{}
}

func (h *gatedHost) Eval(ctx context.Context, _ string, _ []string, _ ...any) (sdk.Reply, error) {
	h.entered <- struct{}{}
	select {
	case <-h.gate:
	case <-ctx.Done():
		return sdk.Reply{}, ctx.Err()
	}
	return sdk.IntsReply(1, 1, 10, 9, 1000, 0), nil
}

func (*gatedHost) Log(sdk.Level, string) {}

// A module that decides in steps holds no instance while its script runs:
// with one instance, eight decisions all reach Redis at once. (Through
// ruled_decide, the second would wait for the first's instance.)
func TestStepsHoldNoInstanceAcrossRedis(t *testing.T) {
	p := fresh(t, pluginPkg("fixedwindow"), wasm.Options{PoolSize: 1, Prewarm: 1, CallTimeout: 5 * time.Second})
	if !p.Steps() {
		t.Fatal("the fixedwindow module does not declare steps")
	}
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 10, "window": "1s"})
	h := &gatedHost{entered: make(chan struct{}), gate: make(chan struct{})}
	const n = 8
	var wg sync.WaitGroup
	results := make(chan error, n)
	for range n {
		wg.Go(func() {
			d, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1})
			if err == nil && (!d.Allowed || d.Remaining != 9 || d.Window != time.Second) {
				t.Errorf("decision %+v", d)
			}
			results <- err
		})
	}
	for i := range n {
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d decisions reached Redis: the others wait for the instance", i, n)
		}
	}
	if s := p.Stats(); s.Instances != 1 || s.Idle != 1 {
		t.Fatalf("%+v: an instance is held while Redis answers", s)
	}
	close(h.gate)
	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Fatal(err)
		}
	}
}
