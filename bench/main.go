// Command bench is ruled's load harness. In one run, on this machine, it
// measures:
//
//   - the raw ceiling: go-redis EVALSHA of the fixed-window script with no
//     ruled in between, unpipelined and autopipelined;
//   - the in-process engine (rules, plugin, capability) against the same Redis;
//   - POST /v1/check over HTTP with keep-alive connections;
//
// each at a fixed concurrency for a bounded time, and prints decisions per
// second, latency percentiles and Redis calls per decision, plus each
// figure as a ratio of the pipelined ceiling. Redis is a private
// redis-server that the harness starts (host/store's managed mode) unless
// -redis names one.
//
//	go run ./bench -duration 5s -concurrency 64
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
)

func main() {
	var (
		duration    = flag.Duration("duration", 5*time.Second, "how long each scenario runs")
		concurrency = flag.Int("concurrency", 64, "concurrent callers (goroutines or HTTP connections)")
		subjects    = flag.Int("subjects", 10_000, "distinct subjects the load spreads over")
		redisURL    = flag.String("redis", "", "Redis URL; empty starts a private redis-server")
		only        = flag.String("only", "", "comma-separated scenarios to run (default all)")
		cpuProfile  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	)
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if err := run(*duration, *concurrency, *subjects, *redisURL, *only); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// result is one scenario's figures.
type result struct {
	name      string
	decisions int64
	elapsed   time.Duration
	latencies []time.Duration
	calls     int64 // Redis script calls during the scenario
	errors    int64
	fixed     [3]time.Duration // p50, p99, p999 when measured elsewhere (wrk)
}

func (r *result) rate() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

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

const rulesYAML = `rules:
  - name: bench
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000000, window: 1h}
`

func run(duration time.Duration, conc, subjects int, redisURL, only string) error {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Options{URL: redisURL, Logger: log, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	client := st.Client()
	want := func(name string) bool { return only == "" || slices.Contains(strings.Split(only, ","), name) }

	dir, err := os.MkdirTemp("", "ruled-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rulesPath := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesYAML), 0o600); err != nil {
		return err
	}
	newEngine := func(pipeline bool) (*host.Engine, error) {
		o := capability.Options{Timeout: time.Second, Logger: log}
		if pipeline {
			o.Pipeline = redis.DefaultBlockingAutoPipelineOptions()
		}
		e, err := host.NewEngine(host.Options{Capability: capability.New(client, o), Plugins: builtin.All(), Logger: log})
		if err != nil {
			return nil, err
		}
		if _, err := e.Load(rulesPath); err != nil {
			return nil, err
		}
		return e, e.Preload(ctx)
	}
	ips := make([]string, subjects)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}

	// The same script the plugin runs, as the engine would call it.
	script := redis.NewScript(capability.Prelude + scriptSource())
	if err := script.Load(ctx, client).Err(); err != nil {
		return fmt.Errorf("loading the script: %w", err)
	}
	raw := func(sc redis.Scripter) func(i int) error {
		return func(i int) error {
			k := "ruled:fixedwindow:bench:{" + ips[i%len(ips)] + "}:"
			return script.Run(ctx, sc, []string{k + "c", k + "d"}, "", 1_000_000_000, 3_600_000_000, 0, 1, "", 0).Err()
		}
	}

	var results []*result
	measure := func(name string, op func(i int) error) {
		if !want(name) {
			return
		}
		before := scriptCalls(ctx, client)
		r := drive(name, duration, conc, op)
		r.calls = scriptCalls(ctx, client) - before
		results = append(results, r)
		fmt.Fprintf(os.Stderr, "%-28s %10.0f/s\n", name, r.rate())
	}

	measure("redis-evalsha", raw(client))
	ap, err := autoPipeliner(client)
	if err != nil {
		return err
	}
	// The pipelined ceiling: EVALSHA submitted to go-redis's autopipeliner
	// (deferred face) and waited for, as the capability does, without it.
	sha := script.Hash()
	measure("redis-evalsha-pipelined", func(i int) error {
		k := "ruled:fixedwindow:bench:{" + ips[i%len(ips)] + "}:"
		cmd := redis.NewCmd(ctx, "evalsha", sha, 2, k+"c", k+"d", "", 1_000_000_000, 3_600_000_000, 0, 1, "", 0)
		if err := ap.Submit(ctx, cmd).Wait(); err != nil {
			return err
		}
		return cmd.Err()
	})
	for _, pipelined := range []bool{false, true} {
		e, err := newEngine(pipelined)
		if err != nil {
			return err
		}
		name := "engine"
		if pipelined {
			name = "engine-pipelined"
		}
		measure(name, func(i int) error {
			res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: ips[i%len(ips)]}, Hits: 1})
			if !res.Allowed || len(res.Results) != 1 || res.Results[0].Degraded != "" {
				return fmt.Errorf("unexpected result %+v", res.Results)
			}
			return nil
		})
	}
	if want("http") {
		e, err := newEngine(true)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: httpapi.New(httpapi.Options{Checker: e, Logger: log})}
		go srv.Serve(ln)
		defer srv.Close()
		url := "http://" + ln.Addr().String() + "/v1/check"
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}
		bodies := make([][]byte, len(ips))
		for i, ip := range ips {
			bodies[i] = []byte(`{"request":{"ip":"` + ip + `","method":"GET","path":"/"}}`)
		}
		measure("http", func(i int) error {
			resp, err := hc.Post(url, "application/json", bytes.NewReader(bodies[i%len(bodies)]))
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		})
	}
	if want("http-wrk") {
		before := scriptCalls(ctx, client)
		r, err := runWrk(ctx, newEngine, duration, conc, log)
		if r != nil {
			r.calls = scriptCalls(ctx, client) - before
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "http-wrk skipped:", err)
		} else {
			results = append(results, r)
			fmt.Fprintf(os.Stderr, "%-28s %10.0f/s\n", r.name, r.rate())
		}
	}
	report(os.Stdout, results, conc, duration)
	return nil
}

// runWrk drives POST /v1/check with wrk (Debian's wrk package), a load
// generator much lighter than Go's HTTP client, with bench/wrk.lua.
func runWrk(ctx context.Context, newEngine func(bool) (*host.Engine, error), d time.Duration, conc int, log *slog.Logger) (*result, error) {
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
	e, err := newEngine(true)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: httpapi.New(httpapi.Options{Checker: e, Logger: log})}
	go srv.Serve(ln)
	defer srv.Close()
	out, err := exec.CommandContext(ctx, bin, "-t", "2", "-c", strconv.Itoa(conc), "-d", fmt.Sprintf("%ds", max(1, int(d.Seconds()))),
		"-s", script, "http://"+ln.Addr().String()+"/v1/check").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wrk: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 7 || f[0] != "RESULT" {
			continue
		}
		v := make([]int64, 6)
		for i := range v {
			v[i], _ = strconv.ParseInt(f[i+1], 10, 64)
		}
		us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
		return &result{name: "http-wrk", decisions: v[0], elapsed: us(v[1]), errors: v[5],
			fixed: [3]time.Duration{us(v[2]), us(v[3]), us(v[4])}}, nil
	}
	return nil, fmt.Errorf("no RESULT line in wrk's output: %s", out)
}

// scriptSource is the fixed-window plugin's script.
func scriptSource() string {
	for _, s := range fixedwindow.New().Info().Scripts {
		if s.Name == "decide" {
			return s.Source
		}
	}
	panic("fixedwindow has no decide script")
}

func autoPipeliner(c redis.UniversalClient) (*redis.AutoPipeliner, error) {
	type ap interface {
		AsyncAutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
	}
	a, ok := c.(ap)
	if !ok {
		return nil, fmt.Errorf("client %T cannot autopipeline", c)
	}
	return a.AsyncAutoPipelineWithOptions(redis.DefaultBlockingAutoPipelineOptions())
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

func scriptCalls(ctx context.Context, c redis.UniversalClient) int64 {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") {
			continue
		}
		if _, rest, ok := strings.Cut(line, "calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			total += n
		}
	}
	return total
}

func report(w io.Writer, rs []*result, conc int, d time.Duration) {
	var ceiling float64
	for _, r := range rs {
		if r.name == "redis-evalsha-pipelined" {
			ceiling = r.rate()
		}
	}
	fmt.Fprintf(w, "\nconcurrency %d, %v per scenario, GOMAXPROCS %d\n\n", conc, d, runtimeProcs())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tdecisions/s\tvs pipelined ceiling\tp50\tp99\tp999\tredis calls/decision\terrors\t")
	for _, r := range rs {
		ratio := "-"
		if ceiling > 0 {
			ratio = fmt.Sprintf("%.2f", r.rate()/ceiling)
		}
		perDecision := "-"
		if r.decisions > 0 {
			perDecision = fmt.Sprintf("%.2f", float64(r.calls)/float64(r.decisions))
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%v\t%v\t%v\t%s\t%d\t\n", r.name, r.rate(), ratio,
			r.percentile(0.50).Round(time.Microsecond), r.percentile(0.99).Round(time.Microsecond),
			r.percentile(0.999).Round(time.Microsecond), perDecision, r.errors)
	}
	tw.Flush()
}

func runtimeProcs() int { return runtime.GOMAXPROCS(0) }
