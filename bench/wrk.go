package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkRunner drives HTTP load with wrk (Debian's wrk package), a load
// generator much lighter than Go's HTTP client, and one of its scripts:
// bench/wrk.lua for ruled's checks, bench/envoy-json.lua for envoy
// ratelimit's POST /json.
type wrkRunner struct {
	bin, script, envoyScript string
	threads                  int // wrk's -t: 2 when zero, never more than the connections
}

// threadsFor is wrk's -t for conc connections.
func (w *wrkRunner) threadsFor(conc int) int {
	threads := w.threads
	if threads == 0 {
		threads = 2
	}
	return max(1, min(threads, conc))
}

// findWrk finds wrk on PATH and its scripts in the repository.
func findWrk(ctx context.Context) (*wrkRunner, error) {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		return nil, errors.New("wrk not installed (scripts/deps.sh bench, or apt-get install wrk)")
	}
	root, err := repoRoot(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "bench")
	return &wrkRunner{bin: bin, script: filepath.Join(dir, "wrk.lua"), envoyScript: filepath.Join(dir, "envoy-json.lua")}, nil
}

// run drives POST url from conc connections for d (whole seconds, at least
// 1) with bench/wrk.lua.
func (w *wrkRunner) run(ctx context.Context, url string, d time.Duration, conc int) (*result, error) {
	r, _, err := w.runScript(ctx, w.script, url, d, conc)
	return r, err
}

// runScript drives url with script, given args, from conc connections for
// d (whole seconds, at least 1); it returns the figures of the script's
// RESULT line and wrk's whole output.
func (w *wrkRunner) runScript(ctx context.Context, script, url string, d time.Duration, conc int, args ...string) (*result, string, error) {
	line := []string{"-t", strconv.Itoa(w.threadsFor(conc)), "-c", strconv.Itoa(conc), "-d", fmt.Sprintf("%ds", max(1, int(d.Seconds()))), "-s", script, url}
	if len(args) > 0 {
		line = append(append(line, "--"), args...)
	}
	cmd := exec.CommandContext(ctx, w.bin, line...)
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		return nil, out, fmt.Errorf("wrk: %v: %s", err, out)
	}
	r, err := parseWrk(out)
	if err != nil {
		return nil, out, err
	}
	r.wrk = true
	r.wrkCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, out, nil
}

// parseWrk reads the RESULT line bench/wrk.lua writes: requests, duration
// (µs), p50, p99, p999 (µs) and errors.
func parseWrk(out string) (*result, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 7 || f[0] != "RESULT" {
			continue
		}
		v := make([]int64, 6)
		for i := range v {
			n, err := strconv.ParseInt(f[i+1], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("wrk's RESULT line %q: %w", line, err)
			}
			v[i] = n
		}
		us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
		return &result{decisions: v[0], elapsed: us(v[1]), errors: v[5],
			fixed: [3]time.Duration{us(v[2]), us(v[3]), us(v[4])}}, nil
	}
	return nil, fmt.Errorf("no RESULT line in wrk's output: %s", out)
}

// parseStatus reads the STATUS line bench/envoy-json.lua writes: how many
// responses were 200, 429 and anything else.
func parseStatus(out string) (ok, over, other int64, err error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || f[0] != "STATUS" {
			continue
		}
		var v [3]int64
		for i := range v {
			if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				return 0, 0, 0, fmt.Errorf("wrk's STATUS line %q: %w", line, err)
			}
		}
		return v[0], v[1], v[2], nil
	}
	return 0, 0, 0, fmt.Errorf("no STATUS line in wrk's output: %s", out)
}
