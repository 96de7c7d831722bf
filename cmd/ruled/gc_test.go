package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestDaemonGCTarget checks the garbage collector's settings of the real
// daemon, as its metrics report them: GOGC 400 and 90 % of the cgroup's
// memory limit (none where the cgroup sets none) by default, and what GOGC
// and GOMEMLIMIT say when they are set.
func TestDaemonGCTarget(t *testing.T) {
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	// Unset, not empty: the daemon must see neither (t.Setenv restores them).
	if err := errors.Join(os.Unsetenv("GOGC"), os.Unsetenv("GOMEMLIMIT")); err != nil {
		t.Fatal(err)
	}
	wantLimit := float64(math.MaxInt64)
	switch n, err := memlimit.FromCgroup(); {
	case err == nil:
		wantLimit = float64(int64(float64(n) * memLimitShare))
	case !errors.Is(err, memlimit.ErrNoLimit):
		t.Fatalf("reading this machine's cgroup memory limit: %v", err)
	}
	t.Logf("want a memory limit of %.0f bytes", wantLimit)
	d := spawnDaemon(t, faultRules())
	if got := d.metric("go_gc_gogc_percent"); got != strconv.Itoa(daemonGCPercent) {
		t.Errorf("default go_gc_gogc_percent %s, want %d", got, daemonGCPercent)
	}
	if got, err := strconv.ParseFloat(d.metric("go_gc_gomemlimit_bytes"), 64); err != nil || got != wantLimit {
		t.Errorf("default go_gc_gomemlimit_bytes %v (%v), want %v", got, err, wantLimit)
	}
	if !strings.Contains(d.log.String(), "percent_from=default") {
		t.Errorf("no gc line with percent_from=default in the log:\n%s", tail(d.log.String(), 20))
	}
	d.stop()

	d = spawnServeEnv(t, []string{"GOGC=100", "GOMEMLIMIT=300MiB"}, "--rules", writeFile(t, t.TempDir(), "rules.yaml", faultRules()))
	if got := d.metric("go_gc_gogc_percent"); got != "100" {
		t.Errorf("with GOGC=100, go_gc_gogc_percent %s", got)
	}
	if got := d.metric("go_gc_gomemlimit_bytes"); got != "3.145728e+08" {
		t.Errorf("with GOMEMLIMIT=300MiB, go_gc_gomemlimit_bytes %s", got)
	}
}

// TestTuneGCKeepsUnderTheCgroupLimit checks tuneGC's choices with the
// memory limit's source given: a limit caps the heap at memLimitShare of
// it, no limit leaves Go's default, and the environment wins over both.
func TestTuneGCKeepsUnderTheCgroupLimit(t *testing.T) {
	percent, limit := debug.SetGCPercent(100), debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() { debug.SetGCPercent(percent); debug.SetMemoryLimit(limit) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	unset := func(string) (string, bool) { return "", false }
	var gib uint64 = 1 << 30

	tuneGC(log, unset, memlimit.Limit(gib))
	if got, want := debug.SetMemoryLimit(-1), int64(float64(gib)*memLimitShare); got != want {
		t.Errorf("under a 1 GiB cgroup limit: memory limit %d, want %d", got, want)
	}
	if got := debug.SetGCPercent(100); got != daemonGCPercent {
		t.Errorf("GC percent %d, want %d", got, daemonGCPercent)
	}

	debug.SetMemoryLimit(math.MaxInt64)
	tuneGC(log, unset, func() (uint64, error) { return 0, memlimit.ErrNoLimit })
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("without a cgroup limit: memory limit %d, want none", got)
	}

	debug.SetGCPercent(100)
	set := func(string) (string, bool) { return "set", true }
	tuneGC(log, set, memlimit.Limit(gib))
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set: memory limit %d, want the environment's (none here)", got)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent %d, want the environment's 100", got)
	}
}

func TestStaticPercent(t *testing.T) {
	for _, c := range []struct {
		live, static uint64
		want         int
	}{
		{10 << 20, 0, 400},        // nothing loaded
		{0, 5 << 20, 400},         // no cycle yet
		{20 << 20, 10 << 20, 200}, // half static: four times the other half
		{100 << 20, 1 << 20, 396}, // a little static
		{12 << 20, 10 << 20, 100}, // mostly static: Go's default at least
		{10 << 20, 12 << 20, 100}, // measured above what is live
		{1 << 30, 9 << 20, 396},   // large dynamic heap: nearly the full target
	} {
		if got := staticPercent(400, c.live, c.static); got != c.want {
			t.Errorf("staticPercent(400, %d, %d) = %d, want %d", c.live, c.static, got, c.want)
		}
	}
}

// TestStaticHeapCountsAModuleOnce loads a stand-in module that pins 64 MB
// and checks that the collector's target comes down so that the heap goal
// grows by daemonGCPercent of the rest, not of the 64 MB, and goes back up
// when the module is forgotten.
func TestStaticHeapCountsAModuleOnce(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(daemonGCPercent))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs strings.Builder
	h := newStaticHeap(ctx, slog.New(slog.NewTextHandler(&logs, nil)))
	pinned := 64 << 20
	module, err := measureLoad(h, func() (*[]byte, error) {
		b := make([]byte, pinned)
		return &b, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := h.total.Load(); n < uint64(pinned)-8<<20 || n > uint64(pinned)+8<<20 {
		t.Fatalf("measured %d static bytes for a module of %d", n, pinned)
	}
	runtime.GC() // a cycle: the target follows
	live := liveHeap()
	want := staticPercent(daemonGCPercent, live, h.total.Load())
	if got := waitGCPercent(func(p int) bool { return p != daemonGCPercent }); got >= daemonGCPercent ||
		got < minGCPercent || abs(got-want) > 10 {
		t.Errorf("GOGC %d with %d of %d live bytes static, want about %d", got, h.total.Load(), live, want)
	}
	if !strings.Contains(logs.String(), "static heap counts once") {
		t.Errorf("no log line:\n%s", logs.String())
	}
	h.forget(module)
	runtime.KeepAlive(module)
	runtime.GC()
	if got := waitGCPercent(func(p int) bool { return p == daemonGCPercent }); got != daemonGCPercent {
		t.Errorf("GOGC %d after the module was forgotten, want %d", got, daemonGCPercent)
	}
	cancel()
}

// waitGCPercent returns the collector's target once done says it is what
// the test waits for, or after five seconds: the cleanup that adjusts it
// runs on its own goroutine after the cycle.
func waitGCPercent(done func(int) bool) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		p := int(s[0].Value.Uint64())
		if done(p) || time.Now().After(deadline) {
			return p
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

func abs(n int) int { return max(n, -n) }

// TestDaemonCountsAWasmModuleOnce runs the real daemon with a built-in as a
// Wasm module: the module's static heap is measured at load and the
// collector's target comes down from daemonGCPercent so that the module is
// not multiplied by it; with GOGC set, the daemon leaves the target alone.
func TestDaemonCountsAWasmModuleOnce(t *testing.T) {
	t.Setenv("GOGC", "") // restored after the test; unset, not empty, for the daemon
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mods := filepath.Join(dir, "plugins")
	buildPlugin(t, "../../plugins/fixedwindow/wasm", filepath.Join(mods, "fixedwindow.wasm"))
	rules := writeFile(t, dir, "rules.yaml", "rules:\n  - name: per-ip\n    subject: request.ip\n    plugin: fixedwindow\n    config: {limit: 3, window: 10s}\n")
	d := spawnServeEnv(t, nil, "--rules", rules, "--builtins", "wasm", "--plugins-dir", mods)
	m := regexp.MustCompile(`msg="gc: a Wasm module's static heap counts once" bytes=(\d+)`).FindStringSubmatch(d.log.String())
	if m == nil {
		t.Fatalf("no static heap line in the log:\n%s", tail(d.log.String(), 20))
	}
	if n, _ := strconv.Atoi(m[1]); n < 1<<20 {
		t.Errorf("the fixedwindow module's static heap measured %d bytes", n)
	}
	var p float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p, _ = strconv.ParseFloat(d.metric("go_gc_gogc_percent"), 64); p < daemonGCPercent {
			break
		}
	}
	if p < minGCPercent || p >= daemonGCPercent {
		t.Errorf("go_gc_gogc_percent %v with a Wasm module loaded, want below %d and at least %d", p, daemonGCPercent, minGCPercent)
	}
	d.stop()

	d = spawnServeEnv(t, []string{"GOGC=300"}, "--rules", rules, "--builtins", "wasm", "--plugins-dir", mods)
	if got := d.metric("go_gc_gogc_percent"); got != "300" || strings.Contains(d.log.String(), "static heap") {
		t.Errorf("with GOGC=300: go_gc_gogc_percent %s, log:\n%s", got, tail(d.log.String(), 10))
	}
}
