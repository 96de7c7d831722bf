package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/internal/redisinfo"
)

// TestEnvoyHarness runs the -envoy mode's plumbing on ruled and on the
// protocol floor: a server started from envoy ratelimit's environment
// answers the probe as the config says and takes both loads, allowed and
// half denied, over gRPC and HTTP, without a failed call.
func TestEnvoyHarness(t *testing.T) {
	ctx := context.Background()
	st, redisURL, wrk := openHarness(t)
	t.Run("ruled", func(t *testing.T) {
		dir := t.TempDir()
		env, err := envoyRuntime(filepath.Join(dir, "runtime"), redisURL)
		if err != nil {
			t.Fatal(err)
		}
		s, err := startRLS(ctx, "ruled", ruledBinary(t), dir, env, []string{"envoy-ratelimit"}, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer s.stop()
		checkHarness(t, s, wrk)
		reads0, err := redisinfo.Reads(ctx, st.Client())
		if err != nil {
			t.Fatal(err)
		}
		r := s.load(ctx, []string{"0", "1", "2"}, false, 4, 200*time.Millisecond)
		if r.errors > 0 || r.decisions == 0 {
			t.Fatalf("%d calls, %d failed\n%s", r.decisions, r.errors, s.logTail())
		}
		// Every call reached Redis in some read, and no call took more
		// than one (beside a few for INFO and new connections).
		reads1, err := redisinfo.Reads(ctx, st.Client())
		if err != nil {
			t.Fatal(err)
		}
		if n := reads1 - reads0; n <= 0 || n > r.decisions+16 {
			t.Fatalf("%d reads for %d calls", n, r.decisions)
		}
		// The verdicts fail loads that do not decide as they must.
		if r := s.load(ctx, []string{"fresh"}, true, 1, 50*time.Millisecond); r.errors == 0 {
			t.Fatal("half denied on a key never exhausted: no call failed, want the first denied-key call allowed and counted as a failure")
		}
		// Over a million users the denied keys are fresh: each allows its
		// first request, so a half-denied load finds far more 200s than
		// 429s.
		if _, err := s.loadHTTP(ctx, wrk, 1_000_000, true, 4, time.Second); err == nil || !strings.Contains(err.Error(), "want half each") {
			t.Fatalf("HTTP half denied on keys never exhausted: %v, want too few 429s", err)
		}
	})
	// The test binary serves the floor (TestMain), as the bench binary
	// does with -serve-floor, its HTTP face by each of the three servers.
	for _, impl := range []string{floorNetHTTP, floorFastHTTP, floorAdaptor} {
		t.Run("floor "+impl, func(t *testing.T) {
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			s, err := startRLS(ctx, floorName, self, t.TempDir(), []string{serveFloorEnv + "=" + impl}, nil, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer s.stop()
			checkHarness(t, s, wrk)
		})
	}
}

// openHarness starts a private Redis, closed when t ends, and finds wrk.
func openHarness(t *testing.T) (*store.Store, string, *wrkRunner) {
	t.Helper()
	st, redisURL, err := openRedis(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	wrk, err := findWrk(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st, redisURL, wrk
}

// checkHarness probes s and drives it with every load of the envoy mode,
// briefly, failing t on any failed call.
func checkHarness(t *testing.T, s *rlsServer, wrk *wrkRunner) {
	t.Helper()
	ctx := context.Background()
	if err := s.probe(ctx); err != nil {
		t.Fatal(err)
	}
	users := []string{"0", "1", "2"} // as wrk names them
	r := s.load(ctx, users, false, 4, 200*time.Millisecond)
	if r.errors > 0 || r.decisions == 0 {
		t.Fatalf("%d calls, %d failed\n%s", r.decisions, r.errors, s.logTail())
	}
	// Half denied: the denied keys' one request is taken first; then every
	// other call must be denied and the rest allowed.
	if err := s.exhaust(ctx, users); err != nil {
		t.Fatal(err)
	}
	if r := s.load(ctx, users, true, 4, 200*time.Millisecond); r.errors > 0 || r.decisions == 0 {
		t.Fatalf("half denied: %d calls, %d failed\n%s", r.decisions, r.errors, s.logTail())
	}
	// The same two loads over HTTP, POST /json from wrk.
	for _, half := range []bool{false, true} {
		h, err := s.loadHTTP(ctx, wrk, len(users), half, 4, time.Second)
		if err != nil {
			t.Fatalf("HTTP, half denied %v: %v", half, err)
		}
		if h.decisions == 0 || h.errors > 0 {
			t.Fatalf("HTTP, half denied %v: %d requests, %d failed", half, h.decisions, h.errors)
		}
	}
}

// TestWantStatuses checks the verdict on an HTTP load's statuses.
func TestWantStatuses(t *testing.T) {
	for _, c := range []struct {
		ok, over, other int64
		half, pass      bool
	}{
		{100, 0, 0, false, true},
		{100, 1, 0, false, false},
		{100, 0, 1, false, false},
		{100, 94, 0, true, true},
		{100, 93, 0, true, false},
		{94, 100, 0, true, true},
		{100, 100, 2, true, false},
	} {
		err := wantStatuses(c.ok, c.over, c.other, c.half, 4, 2)
		if (err == nil) != c.pass {
			t.Errorf("wantStatuses(%d, %d, %d, half %v) = %v, want pass %v", c.ok, c.over, c.other, c.half, err, c.pass)
		}
	}
}

// TestWindowTurned checks when a half-denied load runs again: when an hour
// of Unix time ended while it ran, which gives the denied keys one request
// more each.
func TestWindowTurned(t *testing.T) {
	hour := time.Date(2026, 11, 28, 23, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		a, b time.Time
		want bool
	}{
		{hour.Add(-9 * time.Second), hour.Add(-time.Nanosecond), false},
		{hour.Add(-5 * time.Second), hour.Add(3 * time.Second), true},
		{hour, hour.Add(59 * time.Minute), false},
		{hour.Add(-time.Nanosecond), hour, true},
		// The same instants seen from another zone: windows are Unix time's.
		{hour.Add(-5 * time.Second).In(time.FixedZone("", 5*3600+1800)), hour.Add(3 * time.Second), true},
	} {
		if got := windowTurned(c.a, c.b, deniedWindow); got != c.want {
			t.Errorf("windowTurned(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestEnvoyBinaryFromSource builds a source tree laid out as envoy
// ratelimit's (./src/service_cmd) and names its commit; a file is taken as
// the binary.
func TestEnvoyBinaryFromSource(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	files := map[string]string{
		"go.mod":                  "module example.com/ratelimit\n\ngo 1.21\n",
		"src/service_cmd/main.go": "package main\n\nfunc main() { println(\"built\") }\n",
	}
	for name, body := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", src, "-c", "user.name=t", "-c", "user.email=t@localhost"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "tree")
	rev := git("rev-parse", "--short", "HEAD")

	dir := t.TempDir()
	bin, label, err := envoyBinary(ctx, src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin).CombinedOutput(); err != nil || !strings.Contains(string(out), "built") {
		t.Fatalf("the built binary: %v, %q", err, out)
	}
	if !strings.Contains(label, src) || !strings.HasSuffix(label, " at "+rev) {
		t.Errorf("label %q, want the tree and its commit %s", label, rev)
	}
	if got, label, err := envoyBinary(ctx, bin, dir); err != nil || got != bin || label != bin {
		t.Errorf("a file: %q, %q, %v; want it as it is", got, label, err)
	}
	if _, _, err := envoyBinary(ctx, filepath.Join(src, "go.mod"+"x"), dir); err == nil {
		t.Error("a path that does not exist: no error")
	}
	if err := os.Remove(filepath.Join(src, "src/service_cmd/main.go")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := envoyBinary(ctx, src, dir); err == nil || !strings.Contains(err.Error(), "building envoy ratelimit") {
		t.Errorf("a tree that does not build: %v", err)
	}
}
