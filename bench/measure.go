package main

// What every harness measures a load with: its latencies, Redis's calls and
// CPU time, this process's CPU time.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ruled-dev/ruled/internal/redisinfo"
)

// result is one scenario's figures in one round.
type result struct {
	name      string
	decisions int64
	elapsed   time.Duration
	latencies []time.Duration
	calls     int64 // Redis script calls during the scenario
	errors    int64
	fixed     [3]time.Duration // p50, p99, p999 when measured elsewhere (wrk)

	harnessCPU time.Duration // this process's user+sys time (getrusage RUSAGE_SELF)
	redisCPU   time.Duration // Redis's used_cpu_user+used_cpu_sys; negative if unknown
	wrkCPU     time.Duration // wrk's user+sys time
	wrk        bool          // load from wrk: wrkCPU is meaningful
}

func (r *result) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.decisions) / r.elapsed.Seconds()
}

func (r *result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		switch p {
		case 0.50:
			return r.fixed[0]
		case 0.99:
			return r.fixed[1]
		case 0.999:
			return r.fixed[2]
		}
		return 0
	}
	slices.Sort(r.latencies)
	return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
}

// scenario is one named load; run drives it once and returns its figures
// (name, CPU and Redis calls are filled in by measure).
type scenario struct {
	name string
	run  func() (*result, error)
	// after, if set, runs after every round of the scenario, outside the
	// measurement.
	after func()
}

// measure runs s once and fills in its name, Redis calls and CPU times.
func measure(ctx context.Context, client redis.UniversalClient, s scenario) (*result, error) {
	runtime.GC() // collect the previous scenario's garbage outside the measurement
	calls, _ := redisinfo.ScriptCalls(ctx, client)
	redisBefore, redisErr := redisinfo.CPU(ctx, client)
	self := selfCPU()
	r, err := s.run()
	selfAfter := selfCPU()
	redisAfter, redisErr2 := redisinfo.CPU(ctx, client)
	if err != nil {
		return nil, err
	}
	r.name = s.name
	after, _ := redisinfo.ScriptCalls(ctx, client)
	r.calls = after - calls
	r.harnessCPU = selfAfter - self
	r.redisCPU = redisAfter - redisBefore
	if redisErr != nil || redisErr2 != nil {
		r.redisCPU = -1
	}
	return r, nil
}

// selfCPU is this process's user+sys CPU time so far, every thread.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// drive runs op from conc goroutines for d and records every latency.
func drive(name string, d time.Duration, conc int, op func(i int) error) *result {
	var n, errs atomic.Int64
	lat := make([][]time.Duration, conc)
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			i := g * 7919
			for time.Now().Before(deadline) {
				t := time.Now()
				if err := op(i); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
					}
				}
				lat[g] = append(lat[g], time.Since(t))
				n.Add(1)
				i++
			}
		}()
	}
	wg.Wait()
	r := &result{name: name, decisions: n.Load(), elapsed: time.Since(start), errors: errs.Load()}
	for _, l := range lat {
		r.latencies = append(r.latencies, l...)
	}
	return r
}

func readLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// postCheck posts one check body and drains the answer, which must be 200.
func postCheck(hc *http.Client, url string, body []byte) error {
	resp, err := hc.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
