package main

// The http-floor mode: what another HTTP server would save under envoy
// ratelimit's HTTP face. It runs the protocol floor three times, its HTTP face
// served by net/http (as ruled serves it), by fasthttp under the same
// limits, and by fasthttp through its net/http adaptor (what serving
// ruled's net/http handlers unchanged would give), loads POST /json on each
// in turn with the envoy mode's two loads, and reports each server's CPU
// per request and the others' share of net/http's round by round.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func runHTTPFloor(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "ruled-httpfloor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	wrk, err := findWrk(ctx)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	impls := []string{floorNetHTTP, floorFastHTTP, floorAdaptor}
	var servers []*rlsServer
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, impl := range impls {
		s, err := startRLS(ctx, strings.ReplaceAll(impl, "/", "-"), self, dir, nil, []string{"-serve-floor", "-floor-http", impl}, 1)
		if err != nil {
			return err
		}
		s.name = impl // its log's file is named without the slash
		servers = append(servers, s)
	}
	users := len(userValues(c.subjects))
	for _, s := range servers { // warm up, outside the measurement
		if _, err := s.loadHTTP(ctx, wrk, users, true, c.conc, time.Second); err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
	}
	type sample struct {
		r     *result
		cpuUS float64 // the server's, per request
	}
	measure := func(s *rlsServer, halfDenied bool) (sample, error) {
		cpu0, _, err := treeCPU(s.pid())
		if err != nil {
			return sample{}, err
		}
		r, err := s.loadHTTP(ctx, wrk, users, halfDenied, c.conc, c.duration)
		if err != nil {
			return sample{}, err
		}
		cpu1, _, err := treeCPU(s.pid())
		if err != nil {
			return sample{}, err
		}
		if r.errors > 0 || r.decisions == 0 {
			return sample{}, fmt.Errorf("%s: %d requests, %d failed\n%s", s.name, r.decisions, r.errors, s.logTail())
		}
		return sample{r, float64((cpu1 - cpu0).Nanoseconds()) / 1e3 / float64(r.decisions)}, nil
	}
	phases := []struct {
		name       string
		halfDenied bool
	}{{"allowed", false}, {"half denied", true}}
	// samples[phase][server] holds one sample per round.
	samples := make([][][]sample, len(phases))
	for p := range phases {
		samples[p] = make([][]sample, len(servers))
	}
	for round := 0; round < c.rounds; round++ {
		for p, ph := range phases {
			for k := range servers {
				i := (k + round) % len(servers) // each goes first in turn
				x, err := measure(servers[i], ph.halfDenied)
				if err != nil {
					return fmt.Errorf("%s, round %d: %w", ph.name, round+1, err)
				}
				samples[p][i] = append(samples[p][i], x)
			}
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(w, "the protocol floor's HTTP face, POST /json from wrk over %d connections, served by net/http, by fasthttp, and by fasthttp through its net/http adaptor;\n", c.conc)
	fmt.Fprintf(w, "%d rounds of %v each per load, each server going first in turn, %d subjects; load %s\n",
		c.rounds, c.duration, c.subjects, readLoadAvg())
	for p, ph := range phases {
		fmt.Fprintf(w, "\n%s\trequests/s (median)\tmin–max\tp50\tp99\tserver CPU µs/request\t\n", ph.name)
		for i, s := range servers {
			var rates, cpus []float64
			var rs []*result
			for _, x := range samples[p][i] {
				rates, cpus, rs = append(rates, x.r.rate()), append(cpus, x.cpuUS), append(rs, x.r)
			}
			m := medianRound(rs)
			fmt.Fprintf(w, "%s\t%.0f\t%.0f–%.0f\t%v\t%v\t%.1f\t\n", s.name, median(rates), slices.Min(rates), slices.Max(rates),
				m.percentile(0.50).Round(time.Microsecond), m.percentile(0.99).Round(time.Microsecond), median(cpus))
		}
		for i := 1; i < len(servers); i++ {
			var cpuRatio, saved []float64
			for r := range samples[p][0] {
				a, b := samples[p][i][r], samples[p][0][r]
				cpuRatio = append(cpuRatio, a.cpuUS/b.cpuUS)
				saved = append(saved, b.cpuUS-a.cpuUS)
			}
			fmt.Fprintf(w, "%s / %s, server CPU per request\t%.2f\t%s\t\n", servers[i].name, servers[0].name, median(cpuRatio), roundByRound(cpuRatio))
			fmt.Fprintf(w, "µs saved per request\t%.1f\t%s\t\n", median(saved), roundByRound(saved))
		}
	}
	return w.Flush()
}
