package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnvoyHarness runs the -envoy mode's plumbing on ruled alone: a
// server started from envoy ratelimit's environment answers the probe as
// the config says and takes both loads, allowed and half denied, without a
// failed call.
func TestEnvoyHarness(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ruled := filepath.Join(dir, "ruled")
	build := exec.Command("go", "build", "-o", ruled, "../cmd/ruled")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	st, redisURL, err := openRedis(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	socket, _ := strings.CutPrefix(redisURL, "unix://")
	env := []string{"RUNTIME_ROOT=" + filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + socket, "USE_STATSD=false"}
	s, err := startRLS(ctx, "ruled", ruled, dir, env, []string{"envoy-ratelimit"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if err := s.probe(ctx); err != nil {
		t.Fatal(err)
	}
	reads0, err := redisReads(ctx, st.Client())
	if err != nil {
		t.Fatal(err)
	}
	users := []string{"a", "b", "c"}
	r := s.load(ctx, users, false, 4, 200*time.Millisecond)
	if r.errors > 0 || r.decisions == 0 {
		t.Fatalf("%d calls, %d failed\n%s", r.decisions, r.errors, s.logTail())
	}
	// Every call reached Redis in some read, and no call took more than
	// one (beside a few for INFO and new connections).
	reads1, err := redisReads(ctx, st.Client())
	if err != nil {
		t.Fatal(err)
	}
	if n := reads1 - reads0; n <= 0 || n > r.decisions+16 {
		t.Fatalf("%d reads for %d calls", n, r.decisions)
	}
	// Half denied: the denied keys' one request is taken first; then every
	// other call must be denied and the rest allowed.
	if err := s.exhaust(ctx, users); err != nil {
		t.Fatal(err)
	}
	if r := s.load(ctx, users, true, 4, 200*time.Millisecond); r.errors > 0 || r.decisions == 0 {
		t.Fatalf("half denied: %d calls, %d failed\n%s", r.decisions, r.errors, s.logTail())
	}
	if r := s.load(ctx, []string{"fresh"}, true, 1, 50*time.Millisecond); r.errors == 0 {
		t.Fatal("half denied on a key never exhausted: no call failed, want the first denied-key call allowed and counted as a failure")
	}
}
