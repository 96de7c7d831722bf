package wasm_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

const hostilePkg = "testdata/hostile"

// hostileTimeout is the hostile plugin's call deadline: short, to keep the
// tests quick, and longer than any healthy call.
const hostileTimeout = 400 * time.Millisecond

func hostileOptions(logs *logRecorder) wasm.Options {
	return wasm.Options{CallTimeout: hostileTimeout, MemoryLimitPages: 512, PoolSize: 4, Prewarm: 2, Logger: slog.New(logs)}
}

// hostile returns the shared hostile plugin: a short deadline and 32 MiB
// of memory per instance.
func hostile(t *testing.T) *wasm.Plugin {
	t.Helper()
	return shared(t, "hostile", hostilePkg, hostileOptions(&logRecorder{}))
}

// rig is a plugin and a real Redis to decide against.
type rig struct {
	p   *wasm.Plugin
	reg *capability.Plugin
}

func newRig(t *testing.T, p *wasm.Plugin) *rig {
	t.Helper()
	env := plugintest.NewEnv(t)
	return &rig{p: p, reg: plugintest.Register(t, env.Capability(), p)}
}

// decide runs one decision of the hostile plugin in mode.
func (r *rig) decide(t *testing.T, mode string) (sdk.Decision, error) {
	t.Helper()
	cfg, err := r.p.Configure(map[string]any{"mode": mode})
	if err != nil {
		t.Fatalf("configure %s: %v", mode, err)
	}
	return r.p.Decide(context.Background(), r.reg.Host("r", "s"), cfg, sdk.Request{Subject: "s", Hits: 1})
}

// healthy checks that a well-behaved decision still works.
func (r *rig) healthy(t *testing.T) {
	t.Helper()
	d, err := r.decide(t, "ok")
	if err != nil || !d.Allowed || d.Limit != 10 {
		t.Fatalf("healthy decision after the fault: %+v, %v", d, err)
	}
}

// faulty runs mode, expects a CallError for which check holds, and checks
// that the instance was discarded and the plugin keeps serving.
func faulty(t *testing.T, mode string, check func(*wasm.CallError) bool) {
	r := newRig(t, hostile(t))
	before := r.p.Stats().Discarded
	start := time.Now()
	_, err := r.decide(t, mode)
	took := time.Since(start)
	var ce *wasm.CallError
	if !errors.As(err, &ce) || !check(ce) {
		t.Fatalf("%s: err = %v", mode, err)
	}
	t.Logf("%s: %v (%v)", mode, err, took)
	if took > hostileTimeout+time.Second {
		t.Errorf("%s: answered after %v", mode, took)
	}
	if got := r.p.Stats().Discarded; got != before+1 {
		t.Errorf("%s: discarded %d instances, want 1", mode, got-before)
	}
	r.healthy(t)
}

func TestInfiniteLoopHitsTheDeadline(t *testing.T) {
	faulty(t, "loop", func(e *wasm.CallError) bool {
		return errors.Is(e, context.DeadlineExceeded) && e.Func == "ruled_decide"
	})
}

// TestLoopingGuestDoesNotStallGC shows that a guest spinning in a loop
// leaves machine code often enough for the Go runtime to stop the world: a
// garbage collection during the loop finishes long before the deadline
// ends the loop (with no way back to Go, it would wait for the deadline or
// forever).
func TestLoopingGuestDoesNotStallGC(t *testing.T) {
	r := newRig(t, hostile(t))
	done := make(chan error, 1)
	go func() {
		_, err := r.decide(t, "loop")
		done <- err
	}()
	time.Sleep(hostileTimeout / 8) // the guest is looping by now
	start := time.Now()
	runtime.GC()
	took := time.Since(start)
	select {
	case err := <-done:
		t.Fatalf("the loop ended before the collection was measured: %v", err)
	default:
	}
	if took > hostileTimeout/2 {
		t.Errorf("a garbage collection took %v while a guest looped (deadline %v)", took, hostileTimeout)
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("loop: err = %v, want the deadline", err)
	}
	t.Logf("GC during a looping guest: %v", took)
}

func TestPanicIsAnError(t *testing.T) {
	faulty(t, "panic", func(e *wasm.CallError) bool {
		return strings.Contains(e.Detail, "panic: boom") && !errors.Is(e, context.DeadlineExceeded)
	})
}

func TestRunningOutOfMemoryIsAnError(t *testing.T) {
	faulty(t, "oom", func(e *wasm.CallError) bool {
		// The Go runtime usually reports it on stderr and traps; near the
		// limit it may also collect garbage until the deadline.
		return strings.Contains(e.Detail, "out of memory") || errors.Is(e, context.DeadlineExceeded)
	})
}

func TestExitIsAnError(t *testing.T) {
	faulty(t, "exit", func(e *wasm.CallError) bool { return strings.Contains(e.Error(), "exit_code(3)") })
}

func TestConfigurePanicIsAnError(t *testing.T) {
	r := newRig(t, hostile(t))
	p := r.p
	before := p.Stats().Discarded
	_, err := p.Configure(map[string]any{"mode": "panic-in-configure"})
	var ce *wasm.CallError
	if !errors.As(err, &ce) || ce.Func != "ruled_configure" || !strings.Contains(ce.Detail, "configure exploded") {
		t.Fatalf("err = %v", err)
	}
	if p.Stats().Discarded != before+1 {
		t.Fatal("instance kept")
	}
	r.healthy(t)
}

func TestBadPointersGetStatuses(t *testing.T) {
	logs := &logRecorder{}
	r := newRig(t, fresh(t, hostilePkg, hostileOptions(logs)))
	p := r.p
	before := p.Stats().Discarded
	_, err := r.decide(t, "badptr")
	// bad request, bad reply buffer, length past the end, small buffer,
	// undecodable request, no reply waiting.
	if err == nil || !strings.Contains(err.Error(), "statuses [-1 -1 -1 -5 -2 -4]") {
		t.Fatalf("err = %v", err)
	}
	var ce *wasm.CallError
	if errors.As(err, &ce) || p.Stats().Discarded != before {
		t.Fatalf("a guest that handled bad statuses was discarded: %v", err)
	}
	if len(logs.matching("log: message outside guest memory")) == 0 {
		t.Error("the bad log call was not reported")
	}
	r.healthy(t)
}

func TestUndeclaredScriptIsRefused(t *testing.T) {
	r := newRig(t, hostile(t))
	_, err := r.decide(t, "undeclared")
	if capability.ClassOf(err) != capability.ClassRefused || !strings.Contains(err.Error(), `script "nope" was not declared`) {
		t.Fatalf("err = %v (class %q)", err, capability.ClassOf(err))
	}
	r.healthy(t)
}

func TestLargeRepliesArriveWhole(t *testing.T) {
	d, err := newRig(t, hostile(t)).decide(t, "big")
	if err != nil || d.Remaining != 60000 {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestSleepingDoesNotBlock(t *testing.T) {
	// The sandbox's sleep returns at once; the Go runtime then waits for its
	// timer by polling the clock, within the deadline.
	d, err := newRig(t, hostile(t)).decide(t, "slow")
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestGuestOutputIsLoggedAndBounded(t *testing.T) {
	logs := &logRecorder{}
	if _, err := newRig(t, fresh(t, hostilePkg, hostileOptions(logs))).decide(t, "stdout"); err != nil {
		t.Fatal(err)
	}
	if len(logs.matching("stdout: hello from stdout plugin=hostile")) != 1 {
		t.Errorf("stdout line not logged: %q", logs.matching("stdout"))
	}
	long := logs.matching("stderr: eeee")
	if len(long) != 1 || len(long[0]) > 1100 || !strings.Contains(long[0], "…") {
		t.Errorf("stderr line not logged or not truncated: %d lines", len(long))
	}
}

// countingHost wraps a capability host and counts log lines.
type countingHost struct {
	sdk.Host
	mu   sync.Mutex
	logs int
}

func (h *countingHost) Log(level sdk.Level, msg string) {
	h.mu.Lock()
	h.logs++
	h.mu.Unlock()
}

func TestLogFloodIsRateLimited(t *testing.T) {
	logs := &logRecorder{}
	p := fresh(t, hostilePkg, hostileOptions(logs))
	env := plugintest.NewEnv(t)
	reg := plugintest.Register(t, env.Capability(), p)
	h := &countingHost{Host: reg.Host("r", "s")}
	flood, err := p.Configure(map[string]any{"mode": "logflood"})
	if err != nil {
		t.Fatal(err)
	}
	// The flood's first line begins the plugin's one-second interval; a
	// flood slowed past a second (a busy machine) may use the next ones.
	start := time.Now()
	if _, err := p.Decide(context.Background(), h, flood, sdk.Request{Subject: "s", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if most := 100 * (1 + int(took/time.Second)); h.logs > most {
		t.Fatalf("%d of 1000 lines logged in %s, want at most %d (100 a second)", h.logs, took, most)
	}
	// The next flood's first line begins the next interval and reports
	// the lines dropped in this one.
	time.Sleep(time.Second)
	if _, err := p.Decide(context.Background(), h, flood, sdk.Request{Subject: "s", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	if len(logs.matching("dropped guest log lines")) == 0 {
		t.Error("dropped lines not reported")
	}
}

func TestModuleWithoutTheABIMarkerDoesNotLoad(t *testing.T) {
	_, err := wasm.Load(context.Background(), module(t, "testdata/noabi"), wasm.Options{CacheDir: cacheDir})
	if err == nil || !strings.Contains(err.Error(), "module speaks ruled_abi_v2; this ruled speaks only ruled_abi_v1") {
		t.Fatalf("err = %v", err)
	}
}

func TestModuleWithAForeignImportDoesNotLoad(t *testing.T) {
	_, err := wasm.Load(context.Background(), module(t, "testdata/badimport"), wasm.Options{CacheDir: cacheDir})
	if err == nil || !strings.Contains(err.Error(), "env.sneaky (not provided by ruled)") {
		t.Fatalf("err = %v", err)
	}
}

// wazeroPanicsFile is a 29-byte module on which wazero v1.12.0's validator
// panics (index out of range): function 0 calls function 1, whose type
// index, 48, names no type.
const wazeroPanicsFile = "testdata/wazero-panics.wasm"

// TestMalformedModuleThatPanicsWazeroIsAnError: the meter refuses the
// module before wazero sees it, and with the meter off wazero's panic is
// an error, not a crash.
func TestMalformedModuleThatPanicsWazeroIsAnError(t *testing.T) {
	ctx := context.Background()
	wazeroPanics, err := os.ReadFile(wazeroPanicsFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts wasm.Options
		want string
	}{
		{"metered (the default)", wasm.Options{CacheDir: cacheDir}, "type index 48 out of range (1 types)"},
		{"wazero's interrupt", wasm.WazeroInterruptible(wasm.Options{CacheDir: cacheDir}), "compiling: wazero failed on a malformed module: runtime error: index out of range [48]"},
	} {
		if _, err := wasm.LoadBytes(ctx, "panics.wasm", wazeroPanics, c.opts); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
	if err := wasm.Check(ctx, "panics.wasm", wazeroPanics); err == nil || !strings.Contains(err.Error(), "type index 48 out of range") {
		t.Errorf("Check: err = %v", err)
	}
}

func TestModuleBreakingTheABIIsDiscarded(t *testing.T) {
	p := shared(t, "rawabi", "testdata/rawabi", wasm.Options{PoolSize: 2, Prewarm: 1})
	cfg, err := p.Configure(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &stubHost{}
	decide := func(subject string) (sdk.Decision, error) {
		return p.Decide(context.Background(), h, cfg, sdk.Request{Subject: subject, Hits: 2})
	}
	for _, tc := range []struct{ subject, want string }{
		{"badpacked", "answer at 0xfffffff0+64 lies outside memory"},
		{"garbage", "ruled_decide: abi: DecideResponse"},
		{"zero", "ruled_decide: the guest failed (returned 0)"},
		{strings.Repeat("x", 2<<20), "ruled_buf: returned a"},
	} {
		before := p.Stats().Discarded
		_, err := decide(tc.subject)
		var ce *wasm.CallError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.10s: err = %v, want %q", tc.subject, err, tc.want)
		}
		if p.Stats().Discarded != before+1 {
			t.Errorf("%.10s: instance kept", tc.subject)
		}
		if d, err := decide("fine"); err != nil || d.Granted != 2 {
			t.Fatalf("after %.10s: %+v %v", tc.subject, d, err)
		}
	}
}

// TestMalformedTemplateFailsConfigure checks docs/abi.md's promise for a
// guest written without sdk/guest: a template that calls no script or names
// an unknown request field fails ruled_configure, the instance is discarded
// and the config is refused; the next config loads.
func TestMalformedTemplateFailsConfigure(t *testing.T) {
	p := shared(t, "rawabi", "testdata/rawabi", wasm.Options{PoolSize: 2, Prewarm: 1})
	for mode, want := range map[string]string{
		"no-call":       "template calls no script",
		"unknown-field": "unknown request field 9",
	} {
		before := p.Stats().Discarded
		_, err := p.Configure(map[string]any{"template": mode})
		var ce *wasm.CallError
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "ruled_configure") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want a ruled_configure failure naming %q", mode, err, want)
		}
		if p.Stats().Discarded != before+1 {
			t.Errorf("%s: instance kept", mode)
		}
		if _, err := p.Configure(nil); err != nil {
			t.Fatalf("after %s: %v", mode, err)
		}
	}
}

func TestInspect(t *testing.T) {
	m, err := wasm.Inspect(context.Background(), module(t, hostilePkg))
	if err != nil {
		t.Fatal(err)
	}
	if info := m.Info; m.Steps || info.Name != "hostile" || info.Version != "0.0.1" || len(info.Scripts) != 2 || info.Scripts[1].Name != "big" {
		t.Fatalf("%+v", m)
	}
	if _, err := wasm.Inspect(context.Background(), module(t, "testdata/noabi")); err == nil {
		t.Fatal("inspected a module without the ABI marker")
	}
}

// TestCheck: Check refuses what Load refuses before any instance exists
// (ruled check without --start-plugins relies on it) and accepts a plugin.
func TestCheck(t *testing.T) {
	read := func(pkg string) []byte {
		b, err := os.ReadFile(module(t, pkg))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ctx := context.Background()
	if err := wasm.Check(ctx, "hostile.wasm", read(hostilePkg)); err != nil {
		t.Fatalf("a plugin: %v", err)
	}
	for _, tc := range []struct{ name, want string }{
		{"testdata/noabi", "this ruled speaks only ruled_abi_v1"},
		{"testdata/badimport", "env.sneaky (not provided by ruled)"},
	} {
		if err := wasm.Check(ctx, "x.wasm", read(tc.name)); err == nil || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "x.wasm") {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
	if err := wasm.Check(ctx, "x.wasm", []byte("not a module")); err == nil {
		t.Error("checked bytes that are not a module")
	}
}

func TestBuildReportsCompilerErrors(t *testing.T) {
	dir := t.TempDir()
	err := wasm.Build(context.Background(), dir, dir+"/x.wasm")
	if err == nil || !strings.Contains(err.Error(), "go build in "+dir) {
		t.Fatalf("err = %v", err)
	}
	_ = fmt.Sprint(err)
}
