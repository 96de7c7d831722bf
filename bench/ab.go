package main

// The A/B mode (-ab): ruled's CPU per decision for several builds of
// ruled, measured at the same time so that the machine's load falls on all
// of them alike.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
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
	var daemons []*daemon
	defer func() {
		for _, d := range daemons {
			d.stop()
		}
	}()
	for _, t := range targets {
		sc := driverScenario{name: t.label, rules: ruleYAML("", "bench", "fixedwindow", fixedWindowConfig)}
		d, err := startDaemon(ctx, t.binary, dir, redisURL, sc, conc)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
	}
	bodies := checkBodies(c.subjects)
	for _, d := range daemons { // warm up, outside the measurement
		if r := d.load(bodies, conc, min(c.duration, 2*time.Second)); r.errors > 0 {
			return fmt.Errorf("%s: %d failed checks while warming up\n%s", d.sc.name, r.errors, d.logTail())
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
			wg.Go(func() { results[i] = d.load(bodies, conc, c.duration) })
		}
		wg.Wait()
		for i, d := range daemons {
			cpu1, _, err := treeCPU(d.pid())
			if err != nil {
				return err
			}
			if r := results[i]; r.errors > 0 || r.decisions == 0 {
				return fmt.Errorf("%s: round %d: %d checks, %d failed\n%s", d.sc.name, round+1, r.decisions, r.errors, d.logTail())
			}
			perReq[i] = append(perReq[i], float64((cpu1-cpu0[i]).Microseconds())/float64(results[i].decisions))
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(w, "ruled CPU per check: %d builds at once, %d connections each, %d rounds of %v, %d subjects\n\n",
		len(daemons), conc, c.rounds, c.duration, c.subjects)
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
