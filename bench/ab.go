package main

// The A/B mode (-ab): ruled's CPU per decision for several builds of
// ruled, measured at the same time so that the machine's load falls on all
// of them alike.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"
)

// abTarget is one build under comparison: a label and a ruled binary.
type abTarget struct {
	label, binary string
}

// parseAB reads -ab's LABEL=BINARY,... list.
func parseAB(s string) ([]abTarget, error) {
	var ts []abTarget
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		label, bin, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || label == "" || bin == "" {
			return nil, fmt.Errorf("-ab: want LABEL=BINARY[,LABEL=BINARY...], got %q", item)
		}
		if seen[label] {
			return nil, fmt.Errorf("-ab: label %q twice", label)
		}
		if _, err := os.Stat(bin); err != nil {
			return nil, fmt.Errorf("-ab: %s: %w", label, err)
		}
		seen[label] = true
		ts = append(ts, abTarget{label, bin})
	}
	if len(ts) < 2 {
		return nil, fmt.Errorf("-ab: want at least two builds to compare, got %d", len(ts))
	}
	return ts, nil
}

// runAB starts one `ruled serve` per build against one private
// redis-server, with the drivers mode's native rule, and in each round
// loads all of them at once for -duration, -concurrency connections
// shared between them. It reports each build's CPU time (user+sys, from
// /proc) per answered check, and the median over the rounds of its ratio
// to the first build's in the same round. Listing one binary twice gives an
// A/A pair: how far apart two identical daemons land is the noise floor.
func runAB(c config) error {
	targets, err := parseAB(c.ab)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "ruled-ab-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	st, redisURL, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()

	conc := max(c.conc/len(targets), 1)
	var daemons []abServer
	defer func() {
		for _, d := range daemons {
			d.stop()
		}
	}()
	start := startABDaemon
	if c.abRLS {
		start = startABRLS
	}
	for _, t := range targets {
		d, err := start(ctx, t, dir, redisURL, c.subjects, conc)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
	}
	for _, d := range daemons { // warm up, outside the measurement
		if r := d.load(min(c.duration, 2*time.Second)); r.errors > 0 {
			return fmt.Errorf("%s: %d failed calls while warming up\n%s", d.name, r.errors, d.logTail())
		}
	}

	perReq := make([][]float64, len(daemons)) // µs of ruled's CPU per check, per round
	for round := 0; round < c.rounds; round++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		cpu0 := make([]time.Duration, len(daemons))
		for i, d := range daemons {
			if cpu0[i], _, err = treeCPU(d.pid()); err != nil {
				return err
			}
		}
		results := make([]*result, len(daemons))
		var wg sync.WaitGroup
		for i, d := range daemons {
			wg.Go(func() { results[i] = d.load(c.duration) })
		}
		wg.Wait()
		for i, d := range daemons {
			cpu1, _, err := treeCPU(d.pid())
			if err != nil {
				return err
			}
			if r := results[i]; r.errors > 0 || r.decisions == 0 {
				return fmt.Errorf("%s: round %d: %d calls, %d failed\n%s", d.name, round+1, r.decisions, r.errors, d.logTail())
			}
			perReq[i] = append(perReq[i], float64((cpu1-cpu0[i]).Microseconds())/float64(results[i].decisions))
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	face := "POST /v1/check over HTTP"
	if c.abRLS {
		face = "ShouldRateLimit over gRPC (ruled envoy-ratelimit)"
	}
	fmt.Fprintf(w, "ruled CPU per check, %s: %d builds at once, %d concurrent checks each, %d rounds of %v, %d subjects\n\n",
		face, len(daemons), conc, c.rounds, c.duration, c.subjects)
	fmt.Fprintf(w, "build\tµs/check (median)\tratio to %s (median of rounds)\tratio min–max\t\n", targets[0].label)
	for i, t := range targets {
		ratios := make([]float64, c.rounds)
		for r := range ratios {
			ratios[r] = perReq[i][r] / perReq[0][r]
		}
		fmt.Fprintf(w, "%s\t%.1f\t%.3f\t%.3f–%.3f\t\n", t.label, median(perReq[i]), median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	return w.Flush()
}

// abServer is one build under load in the A/B mode.
type abServer struct {
	name    string
	pid     func() int
	load    func(d time.Duration) *result
	logTail func() string
	stop    func()
}

// startABDaemon starts build t as `ruled serve` with the drivers mode's
// native rule, loaded with POST /v1/check from conc connections.
func startABDaemon(ctx context.Context, t abTarget, dir, redisURL string, subjects, conc int) (abServer, error) {
	sc := driverScenario{name: t.label, rules: ruleYAML("", "bench", "fixedwindow", fixedWindowConfig)}
	d, err := startDaemon(ctx, t.binary, dir, redisURL, sc, conc)
	if err != nil {
		return abServer{}, err
	}
	bodies := checkBodies(subjects)
	return abServer{name: t.label, pid: d.pid, logTail: d.logTail, stop: d.stop,
		load: func(dur time.Duration) *result { return d.load(bodies, conc, dur) }}, nil
}

// startABRLS starts build t as envoy ratelimit (ruled envoy-ratelimit on
// bench/envoy-config.yaml, the envoy mode's environment), loaded with
// ShouldRateLimit of user=N descriptors, every call allowed, from conc
// concurrent calls.
func startABRLS(ctx context.Context, t abTarget, dir, redisURL string, subjects, conc int) (abServer, error) {
	env, err := envoyRuntime(filepath.Join(dir, t.label+"-runtime"), redisURL)
	if err != nil {
		return abServer{}, fmt.Errorf("-ab-rls: %w", err)
	}
	s, err := startRLS(ctx, t.label, t.binary, dir, env, []string{"envoy-ratelimit"}, rlsConns(conc))
	if err != nil {
		return abServer{}, err
	}
	if err := s.probe(ctx); err != nil {
		s.stop()
		return abServer{}, err
	}
	users := userValues(subjects)
	return abServer{name: t.label, pid: s.pid, logTail: s.logTail, stop: s.stop,
		load: func(dur time.Duration) *result { return s.load(ctx, users, false, conc, dur) }}, nil
}
