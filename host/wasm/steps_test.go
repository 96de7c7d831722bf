package wasm_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
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

// The pool grows while every instance is busy and shrinks back to Prewarm
// once no call has needed the extra instances for IdleTimeout. The
// hostile test module decides by blocking in Eval, so each decision holds
// an instance while its script waits.
func TestPoolGrowsWithDemandAndShrinksBack(t *testing.T) {
	p := fresh(t, hostilePkg, wasm.Options{PoolSize: 4, Prewarm: 1,
		IdleTimeout: 100 * time.Millisecond, CallTimeout: 5 * time.Second})
	if p.Steps() {
		t.Fatal("the hostile module decides in steps: this test needs a module that blocks in Eval")
	}
	cfg := plugintest.Configure(t, p, map[string]any{})
	h := &gatedHost{entered: make(chan struct{}), gate: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			_, _ = p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1, DedupID: fmt.Sprint("lease-", i)})
		})
	}
	for range 4 {
		select {
		case <-h.entered:
		case <-time.After(10 * time.Second):
			t.Fatal("the decisions did not reach Eval")
		}
	}
	if s := p.Stats(); s.Instances != 4 || s.Idle != 0 {
		t.Fatalf("%+v: four waiting decisions, want four busy instances", s)
	}
	close(h.gate)
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Instances != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := p.Stats(); s.Instances != 1 || s.Trimmed != 3 {
		t.Fatalf("%+v: want the pool back at Prewarm (1), 3 instances trimmed", s)
	}
	// Still usable.
	h2 := &gatedHost{entered: make(chan struct{}, 1), gate: make(chan struct{})}
	close(h2.gate)
	if _, err := p.Decide(context.Background(), h2, cfg, sdk.Request{Subject: "s", Hits: 1, DedupID: "lease-4"}); err != nil {
		t.Fatal(err)
	}
}

// Closing a plugin whose call outlives the close's deadline does not pull
// the instance's memory from under the call: the call finishes, and the
// daemon does not crash.
func TestCloseDuringACallKeepsTheCallsMemory(t *testing.T) {
	path := module(t, hostilePkg)
	p, err := wasm.Load(context.Background(), path, wasm.Options{PoolSize: 1, Prewarm: 1, CacheDir: cacheDir, CallTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cfg := plugintest.Configure(t, p, map[string]any{})
	h := &gatedHost{entered: make(chan struct{}), gate: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1, DedupID: "a"})
		done <- err
	}()
	<-h.entered // the guest is inside redis_eval
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_ = p.Close(ctx) // gives up waiting and closes the runtime
	cancel()
	close(h.gate) // the guest resumes and reads its reply
	select {
	case <-done: // an error or not: the process is alive
	case <-time.After(10 * time.Second):
		t.Fatal("the call never ended")
	}
}
