package main

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

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
