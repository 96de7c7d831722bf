package wasm_test

import (
	"context"
	"errors"
	"flag"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// TestInstancesAreNeverShared hammers a small pool from many goroutines
// against real Redis. The guest fails a decision that finds its instance
// already inside Decide, the race detector watches the host side, and the
// pool never holds more instances than its size.
func TestInstancesAreNeverShared(t *testing.T) {
	p := fresh(t, hostilePkg, wasm.Options{PoolSize: 3, Prewarm: 1})
	env := plugintest.NewEnv(t)
	reg := plugintest.Register(t, env.Capability(), p)
	cfg, err := p.Configure(map[string]any{"mode": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := reg.Host("r", "s")
			for range 40 {
				if _, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1}); err != nil {
					errs <- err
					return
				}
				if n := p.Stats().Instances; n > 3 {
					errs <- errors.New("more instances than the pool size")
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Discarded != 0 || s.Created > 3 {
		t.Fatalf("%+v", s)
	}
}

func TestWaitingForAnInstanceIsBoundedByTheContext(t *testing.T) {
	// One instance only, busy looping until its deadline.
	p2 := fresh(t, hostilePkg, wasm.Options{PoolSize: 1, Prewarm: 1, CallTimeout: hostileTimeout})
	loop, err := p2.Configure(map[string]any{"mode": "loop"})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := p2.Configure(map[string]any{"mode": "ok"})
	if err != nil {
		t.Fatal(err)
	}
	h := &stubHost{reply: sdk.IntsReply(1, 1, 10, 9, 1000000, 0)}
	looping := make(chan error)
	go func() {
		_, err := p2.Decide(context.Background(), h, loop, sdk.Request{Subject: "s", Hits: 1})
		looping <- err
	}()
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = p2.Decide(ctx, h, ok, sdk.Request{Subject: "s", Hits: 1})
	var ce *wasm.CallError
	if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ce) {
		t.Fatalf("waiting with a short context: %v", err)
	}
	// Without a short context the call waits for the looping instance to
	// be discarded and runs on its replacement.
	if d, err := p2.Decide(context.Background(), h, ok, sdk.Request{Subject: "s", Hits: 1}); err != nil || !d.Allowed {
		t.Fatalf("after the loop: %+v %v", d, err)
	}
	if err := <-looping; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("loop: %v", err)
	}
	// A context that is already done costs no instance.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	before := p2.Stats().Discarded
	if _, err := p2.Decide(done, h, ok, sdk.Request{Subject: "s", Hits: 1}); !errors.Is(err, context.Canceled) || p2.Stats().Discarded != before {
		t.Fatalf("done context: %v, %+v", err, p2.Stats())
	}
}

// TestCloseLeavesNothingBehind checks that instances, background
// replacements and wazero's goroutines are all gone after Close.
func TestCloseLeavesNothingBehind(t *testing.T) {
	env := plugintest.NewEnv(t)
	c := env.Capability()
	module(t, hostilePkg)
	runtime.GC()
	baseline := runtime.NumGoroutine()

	opts := hostileOptions(&logRecorder{})
	opts.CacheDir = cacheDir
	p, err := wasm.Load(context.Background(), module(t, hostilePkg), opts)
	if err != nil {
		t.Fatal(err)
	}
	reg := plugintest.Register(t, c, p)
	var cfgs []sdk.Config
	for _, mode := range []string{"ok", "panic", "ok", "exit"} {
		cfg, err := p.Configure(map[string]any{"mode": mode})
		if err != nil {
			t.Fatal(err)
		}
		cfgs = append(cfgs, cfg)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 4 {
				_, _ = p.Decide(context.Background(), reg.Host("r", "s"), cfgs[(g+i)%len(cfgs)], sdk.Request{Subject: "s", Hits: 1})
			}
		}()
	}
	wg.Wait()
	// Discarded instances are replaced in the background: wait for the
	// pool to be warm again, so that Close has instances to free.
	warm := time.Now().Add(10 * time.Second)
	for p.Stats().Instances == 0 && time.Now().Before(warm) {
		time.Sleep(10 * time.Millisecond)
	}
	if s := p.Stats(); s.Discarded == 0 || s.Instances == 0 {
		t.Fatalf("before close: %+v", s)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Instances != 0 {
		t.Fatalf("after close: %+v", s)
	}
	if _, err := p.Decide(context.Background(), reg.Host("r", "s"), cfgs[0], sdk.Request{Subject: "s", Hits: 1}); !errors.Is(err, wasm.ErrClosed) {
		t.Fatalf("decide after close: %v", err)
	}
	start := time.Now()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("goroutines back to %d in %v", baseline, time.Since(start))
	if n := runtime.NumGoroutine(); n > baseline {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines, %d before Load:\n%s", n, baseline, buf[:runtime.Stack(buf, true)])
	}
}

// TestDroppedConfigsAreForgotten checks that configs the engine no longer
// holds leave the host's table, and that instances full of them are
// recycled. Its decisions go through the guest (NoTemplates): an instance
// is recycled when a call gives it back.
func TestDroppedConfigsAreForgotten(t *testing.T) {
	p := fresh(t, pluginPkg(fixedwindow.Name), wasm.Options{PoolSize: 1, Prewarm: 1, NoTemplates: true})
	h := &stubHost{reply: sdk.IntsReply(1, 1, 10, 9, 1000000, 0)}
	keep, err := p.Configure(map[string]any{"limit": 1, "window": "1s"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		cfg, err := p.Configure(map[string]any{"limit": i + 1, "window": "1s"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Configs > 1 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if s := p.Stats(); s.Configs != 1 {
		t.Fatalf("%d configs live, want 1", s.Configs)
	}
	if _, err := p.Decide(context.Background(), h, keep, sdk.Request{Subject: "s", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Recycled == 0 || s.Discarded != 0 {
		t.Fatalf("instance holding 200 dead configs not recycled: %+v", s)
	}
	// The replacement learns the live config on first use.
	if _, err := p.Decide(context.Background(), h, keep, sdk.Request{Subject: "s", Hits: 1}); err != nil {
		t.Fatal(err)
	}
}

// memoryDecisions is how many decisions TestMemoryStaysFlat measures over,
// after 15,000 to settle. docs/abi.md records a run with 1,000,000:
//
//	go test -run TestMemoryStaysFlat -v ./host/wasm -memory-decisions 1000000
var memoryDecisions = flag.Int("memory-decisions", 20_000, "decisions TestMemoryStaysFlat measures over")

// TestMemoryStaysFlat runs many decisions through the guest (NoTemplates)
// and checks that neither the instances' memory nor the host's heap keeps
// growing.
func TestMemoryStaysFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	p := fresh(t, pluginPkg(fixedwindow.Name), wasm.Options{PoolSize: 2, Prewarm: 2, NoTemplates: true})
	h := &stubHost{reply: sdk.IntsReply(1, 1, 10, 9, 1000000, 0)}
	cfg, err := p.Configure(map[string]any{"limit": 10, "window": "1s"})
	if err != nil {
		t.Fatal(err)
	}
	run := func(n int) {
		for i := range n {
			req := sdk.Request{Subject: "subject", Hits: 1, DedupID: "d", Attrs: map[string]string{"i": "x"}}
			if i%2 == 0 {
				req.Subject = "another-subject"
			}
			if _, err := p.Decide(context.Background(), h, cfg, req); err != nil {
				t.Fatal(err)
			}
		}
	}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	run(15000) // the guest's heap settles after a few collections
	mem, h0 := p.Stats().MaxMemory, heap()
	run(*memoryDecisions)
	mem2, h1 := p.Stats().MaxMemory, heap()
	t.Logf("over %d decisions: instance memory %d -> %d bytes, host heap %d -> %d bytes", *memoryDecisions, mem, mem2, h0, h1)
	if mem2 > mem+1<<20 {
		t.Errorf("instance memory grew from %d to %d bytes", mem, mem2)
	}
	if h1 > h0+4<<20 {
		t.Errorf("host heap grew from %d to %d bytes", h0, h1)
	}
	if s := p.Stats(); s.Created != 2 {
		t.Errorf("%+v: instances were replaced", s)
	}
}
