package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"0": {0}, "1-3": {1, 2, 3}, "0,4-5": {0, 4, 5}, "2, 2-3": {2, 3}} {
		if got, err := parseCPUList(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a", "3-1", "-1", "1-", "1,,2"} {
		if got, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) = %v, want an error", in, got)
		}
	}
}

func TestScaleLayout(t *testing.T) {
	l, err := scaleLayout(16, []int{1, 2, 4, 8}, "0", "")
	if err != nil || !slices.Equal(l.redis, []int{0}) || !slices.Equal(l.servers, []int{1, 2, 3, 4, 5, 6, 7, 8}) ||
		!slices.Equal(l.load, []int{9, 10, 11, 12, 13, 14, 15}) {
		t.Fatalf("16 CPUs: %+v, %v", l, err)
	}
	if l, err := scaleLayout(16, []int{2}, "3", "10-11"); err != nil || !slices.Equal(l.servers, []int{0, 1}) || !slices.Equal(l.load, []int{10, 11}) {
		t.Fatalf("Redis on CPU 3, load named: %+v, %v", l, err)
	}
	for _, c := range []struct {
		cpus             int
		ns               []int
		redis, load, err string
	}{
		{8, []int{8}, "0", "", "this machine has 8"},
		{9, []int{8}, "0", "", "no CPU left for the load"},
		{4, []int{1}, "0", "4", "CPU 4"},
		{4, []int{1}, "x", "", "-redis-cpus"},
	} {
		if _, err := scaleLayout(c.cpus, c.ns, c.redis, c.load); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("scaleLayout(%d, %v, %q, %q) = %v, want an error saying %q", c.cpus, c.ns, c.redis, c.load, err, c.err)
		}
	}
}

// TestScalePinning starts ruled as envoy ratelimit pinned to one CPU, as
// the scale mode does for N=1, and checks that every thread of it stays
// on that CPU, that it uses no more than one core under load, and that
// pinning this process moves all its threads.
func TestScalePinning(t *testing.T) {
	ctx := context.Background()
	st, redisURL, wrk := openHarness(t)
	dir := t.TempDir()
	env, err := envoyRuntime(dir+"/runtime", redisURL)
	if err != nil {
		t.Fatal(err)
	}
	cpu := runtime.NumCPU() - 1
	servers, err := startPinned(ctx, dir, env, []int{cpu}, 8, []serverCmd{{"ruled", ruledBinary(t), []string{"envoy-ratelimit"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := servers[0]
	defer s.stop()
	users := userValues(100)
	for _, http := range []bool{false, true} {
		x, err := measureLoad(ctx, st, s, wrk, users, http, false, 8, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// CPU time comes from /proc in clock ticks: allow a few.
		if x.cores <= 0 || x.cores > 1.05 {
			t.Errorf("http %v: pinned to one CPU, ruled used %.2f cores", http, x.cores)
		}
	}
	checkAffinity(t, s.pid(), []int{cpu})

	all := make([]int, runtime.NumCPU())
	for i := range all {
		all[i] = i
	}
	t.Cleanup(func() {
		if err := pin(os.Getpid(), all); err != nil {
			t.Error(err)
		}
	})
	if err := pin(os.Getpid(), []int{0}); err != nil {
		t.Fatal(err)
	}
	checkAffinity(t, os.Getpid(), []int{0})
}

// checkAffinity fails t unless every thread of pid may run on cpus only.
func checkAffinity(t *testing.T, pid int, cpus []int) {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if got, err := parseCPUList(strings.TrimSpace(v)); err != nil || !slices.Equal(got, cpus) {
					t.Fatalf("thread %s of %d may run on CPUs %q, want %v", task.Name(), pid, strings.TrimSpace(v), cpus)
				}
			}
		}
	}
}
