package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// wrkRunner drives HTTP load with wrk (Debian's wrk package), a load
// generator much lighter than Go's HTTP client, and bench/wrk.lua.
type wrkRunner struct{ bin, script string }

func findWrk() (*wrkRunner, error) {
	bin, err := exec.LookPath("wrk")
	if err != nil {
		return nil, errors.New("wrk not installed (apt-get install wrk)")
	}
	script, err := filepath.Abs("bench/wrk.lua")
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("run from the repository root: %w", err)
	}
	return &wrkRunner{bin: bin, script: script}, nil
}

// run drives POST url from conc connections for d (whole seconds, at least 1).
func (w *wrkRunner) run(ctx context.Context, url string, d time.Duration, conc int) (*result, error) {
	cmd := exec.CommandContext(ctx, w.bin, "-t", "2", "-c", strconv.Itoa(conc), "-d", fmt.Sprintf("%ds", max(1, int(d.Seconds()))),
		"-s", w.script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wrk: %v: %s", err, out)
	}
	r, err := parseWrk(string(out))
	if err != nil {
		return nil, err
	}
	r.wrk = true
	r.wrkCPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
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
