// Command bench is ruled's load harness. In one run, on this machine, it
// measures:
//
//   - the raw ceiling: go-redis EVALSHA of the fixed-window script with no
//     ruled in between, unpipelined and autopipelined;
//   - the in-process engine (rules, plugin, capability) against the same Redis;
//   - POST /v1/check over HTTP with keep-alive connections, from Go's HTTP
//     client and from wrk;
//   - the HTTP floor: a net/http server answering a captured check answer
//     (no rules, no Redis), driven by wrk the same way;
//
// each at a fixed concurrency for a bounded time, -rounds times interleaved
// (every scenario in round 1, then every scenario in round 2, ...). It prints
// per scenario the median decisions per second and its range over the
// rounds, the latency percentiles of the median round, Redis calls per
// decision, CPU time per decision (this process, Redis, wrk), and the rate as
// a ratio of the pipelined ceiling measured in the same round. Redis is a
// private redis-server that the harness starts (host/store's managed mode)
// unless -redis names one.
//
//	go run ./bench -duration 5s -concurrency 64 -rounds 3
//
// # A/B
//
// With -ab it compares builds of ruled: one `ruled serve` per LABEL=BINARY,
// all against one private redis-server and all loaded at once in each round
// (-concurrency connections shared between them), and reports each one's
// CPU time per check and its ratio to the first build's in the same round.
// Timed slices one daemon after another are too noisy on a shared machine
// for differences of a few percent; loaded together, two daemons of the same
// binary land within 1 %. Name one binary twice to see that floor:
//
//	go run ./bench -ab old=/tmp/ruled-old,new=/tmp/ruled-new,same=/tmp/ruled-old -concurrency 66 -rounds 20 -duration 3s
//
// # Drivers
//
// With -drivers it measures the plugin drivers instead (issue 18), each in
// a real daemon: it builds cmd/ruled, the fixedwindow built-in and
// examples/plugins/gcra as Wasm modules (`ruled plugin build`) and
// fixedwindow as a process plugin (bench/fwprocess), once, into a temporary
// directory; starts one redis-server and one `ruled serve` per scenario in
// its default configuration (but --rules, --listen, --redis and the
// driver's flags), each with one rule over request.ip:
//
//   - native: fixedwindow linked in;
//   - wasm-builtin: the same rule with --builtins=wasm;
//   - process: the same rule through the process plugin;
//   - native-tokenbucket: tokenbucket linked in;
//   - wasm-gcra: the gcra Wasm plugin with tokenbucket's config.
//
// It keeps every daemon running through the whole run, warms each up, and
// then drives POST /v1/check from Go's HTTP client (keep-alive) at
// -concurrency for -duration, every scenario in round 1, then every one in
// round 2, ..., each round followed by a low-load pass (one connection for
// -low-duration). Per scenario it reports the median requests per second
// and their range, p50/p99 of the median round, p50/p99 at low load, CPU per
// request of ruled and its child processes (/proc/PID/stat), Redis and this
// process, ruled's VmRSS at the end of the load and its VmHWM, and the
// per-round ratios to the native scenario of the same round (throughput and
// p99; wasm-gcra against native-tokenbucket), with issue 18's targets.
// -only picks among these scenario names; -json writes JSON instead of the
// table. Run it from the repository (it builds from there):
//
//	go run ./bench -drivers -duration 5s -rounds 3
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
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
	"syscall"
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

// Scenario names, in the order each round runs them.
const (
	scRedis          = "redis-evalsha"
	scRedisPipelined = "redis-evalsha-pipelined" // the ceiling
	scEngine         = "engine"
	scEnginePipe     = "engine-pipelined"
	scHTTP           = "http"
	scHTTPWrk        = "http-wrk"
	scHTTPFloor      = "http-floor"
)

var scenarioNames = []string{scRedis, scRedisPipelined, scEngine, scEnginePipe, scHTTP, scHTTPWrk, scHTTPFloor}

type config struct {
	duration time.Duration
	conc     int
	subjects int
	rounds   int
	redisURL string
	only     string

	drivers     bool          // the drivers mode instead of the in-process scenarios
	lowDuration time.Duration // the drivers mode's low-load pass
	json        bool          // the drivers mode's report as JSON

	ab string // the A/B mode's LABEL=BINARY list
}

func main() {
	var c config
	flag.DurationVar(&c.duration, "duration", 5*time.Second, "how long each scenario runs in each round")
	flag.IntVar(&c.conc, "concurrency", 64, "concurrent callers (goroutines or HTTP connections)")
	flag.IntVar(&c.subjects, "subjects", 10_000, "distinct subjects the load spreads over")
	flag.IntVar(&c.rounds, "rounds", 3, "run the selected scenarios this many times, interleaved, and report medians")
	flag.StringVar(&c.redisURL, "redis", "", "Redis URL; empty starts a private redis-server")
	flag.StringVar(&c.only, "only", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames, ",")+
		"; with -drivers: "+strings.Join(driverNames, ","))
	flag.BoolVar(&c.drivers, "drivers", false, "measure the plugin drivers, each in a ruled serve daemon over HTTP (see the package comment)")
	flag.DurationVar(&c.lowDuration, "low-duration", 2*time.Second, "with -drivers: how long each round's low-load pass (one connection) runs per scenario")
	flag.BoolVar(&c.json, "json", false, "with -drivers: write the report as JSON")
	flag.StringVar(&c.ab, "ab", "", "compare builds of ruled instead: LABEL=BINARY,LABEL=BINARY,... all loaded at once, ruled's CPU per check (see the package comment)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if c.rounds < 1 {
		fmt.Fprintln(os.Stderr, "bench: -rounds must be at least 1")
		os.Exit(2)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	runMode := run
	switch {
	case c.ab != "":
		runMode = runAB
	case c.drivers:
		runMode = runDrivers
	}
	if err := runMode(c); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

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

const rulesYAML = `rules:
  - name: bench
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000000, window: 1h}
`

// scenario is one named load; run drives it once and returns its figures
// (name, CPU and Redis calls are filled in by measure).
type scenario struct {
	name string
	run  func() (*result, error)
	// after, if set, runs after every round of the scenario, outside the
	// measurement.
	after func()
}

func run(c config) error {
	selected, err := parseOnly(c.only)
	if err != nil {
		return err
	}
	loadAvg := readLoadAvg()
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(ctx, store.Options{URL: c.redisURL, Logger: log, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer st.Close()
	client := st.Client()

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
		if _, err := e.Load(context.Background(), rulesPath); err != nil {
			return nil, err
		}
		return e, e.Preload(ctx)
	}
	ips := make([]string, c.subjects)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}

	var scenarios []scenario
	inProcess := func(name string, op func(i int) error) {
		if selected[name] {
			scenarios = append(scenarios, scenario{name: name, run: func() (*result, error) {
				return drive(name, c.duration, c.conc, op), nil
			}})
		}
	}

	// The same script the plugin runs, as the engine would call it.
	script := redis.NewScript(capability.Source("fixedwindow", "decide", scriptSource()))
	if err := script.Load(ctx, client).Err(); err != nil {
		return fmt.Errorf("loading the script: %w", err)
	}
	inProcess(scRedis, func(i int) error {
		k := "ruled:fixedwindow:bench:{" + ips[i%len(ips)] + "}:"
		return script.Run(ctx, client, []string{k + "c", k + "d"}, "", 1_000_000_000, 3_600_000_000, 0, 1, "", 0).Err()
	})
	if selected[scRedisPipelined] {
		ap, err := autoPipeliner(client)
		if err != nil {
			return err
		}
		// The pipelined ceiling: EVALSHA submitted to go-redis's autopipeliner
		// (deferred face) and waited for, as the capability does, without it.
		sha := script.Hash()
		inProcess(scRedisPipelined, func(i int) error {
			k := "ruled:fixedwindow:bench:{" + ips[i%len(ips)] + "}:"
			cmd := redis.NewCmd(ctx, "evalsha", sha, 2, k+"c", k+"d", "", 1_000_000_000, 3_600_000_000, 0, 1, "", 0)
			if err := ap.Submit(ctx, cmd).Wait(); err != nil {
				return err
			}
			return cmd.Err()
		})
	}
	for _, name := range []string{scEngine, scEnginePipe} {
		if !selected[name] {
			continue
		}
		e, err := newEngine(name == scEnginePipe)
		if err != nil {
			return err
		}
		defer e.Close(ctx)
		inProcess(name, func(i int) error {
			res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: ips[i%len(ips)]}, Hits: 1})
			if !res.Allowed || len(res.Results) != 1 || res.Results[0].Degraded != "" {
				return fmt.Errorf("unexpected result %+v", res.Results)
			}
			return nil
		})
	}

	// HTTP: one ruled server (autopipelined engine, as `ruled serve` runs)
	// for the Go client and wrk; the floor answers what ruled answered once.
	var wrk *wrkRunner
	if selected[scHTTPWrk] || selected[scHTTPFloor] {
		if wrk, err = findWrk(); err != nil {
			fmt.Fprintf(os.Stderr, "%s and %s skipped: %v\n", scHTTPWrk, scHTTPFloor, err)
		}
	}
	needRuled := selected[scHTTP] || (wrk != nil && selected[scHTTPWrk])
	if needRuled || (wrk != nil && selected[scHTTPFloor]) {
		e, err := newEngine(true)
		if err != nil {
			return err
		}
		defer e.Close(ctx)
		api := httpapi.New(httpapi.Options{Checker: e, Logger: log})
		var ruledURL string
		if needRuled {
			u, stop, err := serve(api)
			if err != nil {
				return err
			}
			defer stop()
			ruledURL = u + "/v1/check"
		}
		if selected[scHTTP] {
			hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c.conc, MaxConnsPerHost: c.conc}}
			bodies := make([][]byte, len(ips))
			for i, ip := range ips {
				bodies[i] = []byte(`{"request":{"ip":"` + ip + `","method":"GET","path":"/"}}`)
			}
			inProcess(scHTTP, func(i int) error { return postCheck(hc, ruledURL, bodies[i%len(bodies)]) })
			// Close the keep-alive connections so that they do not sit on
			// the server during the other scenarios.
			scenarios[len(scenarios)-1].after = hc.CloseIdleConnections
		}
		if wrk != nil && selected[scHTTPWrk] {
			scenarios = append(scenarios, scenario{name: scHTTPWrk, run: func() (*result, error) {
				return wrk.run(ctx, ruledURL, c.duration, c.conc)
			}})
		}
		if wrk != nil && selected[scHTTPFloor] {
			f, err := captureAnswer(api)
			if err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "%s answers 200 with %s and %d bytes: %s\n", scHTTPFloor, f.headerString(), len(f.body), f.body)
			u, stop, err := serve(f)
			if err != nil {
				return err
			}
			defer stop()
			scenarios = append(scenarios, scenario{name: scHTTPFloor, run: func() (*result, error) {
				return wrk.run(ctx, u+"/v1/check", c.duration, c.conc)
			}})
		}
	}

	results := make(map[string][]*result, len(scenarios))
	for round := 1; round <= c.rounds; round++ {
		for _, s := range scenarios {
			r, err := measure(ctx, client, s)
			if s.after != nil {
				s.after()
			}
			results[s.name] = append(results[s.name], r) // nil if it failed
			if err != nil {
				fmt.Fprintf(os.Stderr, "round %d/%d  %-24s failed: %v\n", round, c.rounds, s.name, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "round %d/%d  %-24s %10.0f/s\n", round, c.rounds, s.name, r.rate())
		}
	}
	names := make([]string, len(scenarios))
	for i, s := range scenarios {
		names[i] = s.name
	}
	report(os.Stdout, reportHeader{conc: c.conc, duration: c.duration, rounds: c.rounds, loadAvg: loadAvg}, names, results)
	return nil
}

// measure runs s once and fills in its name, Redis calls and CPU times.
func measure(ctx context.Context, client redis.UniversalClient, s scenario) (*result, error) {
	runtime.GC() // collect the previous scenario's garbage outside the measurement
	calls := scriptCalls(ctx, client)
	redisBefore, redisErr := redisCPU(ctx, client)
	self := selfCPU()
	r, err := s.run()
	selfAfter := selfCPU()
	redisAfter, redisErr2 := redisCPU(ctx, client)
	if err != nil {
		return nil, err
	}
	r.name = s.name
	r.calls = scriptCalls(ctx, client) - calls
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

// serve serves h on a loopback port with the harness's http.Server settings
// (the same for ruled and the floor) and returns its base URL.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := httpapi.NewServer(h) // the time-outs ruled serve runs with
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// floorHandler is the HTTP floor: it reads the request body and answers a
// constant check answer captured from ruled, with the same headers, and does
// nothing else (no routing, no JSON, no rules, no Redis).
type floorHandler struct {
	header [][2]string // canonical key, value; set with Header.Set as ruled does
	body   []byte
}

func (f *floorHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	h := w.Header()
	for _, kv := range f.header {
		h.Set(kv[0], kv[1])
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(f.body)
}

func (f *floorHandler) headerString() string {
	var b strings.Builder
	for _, kv := range f.header {
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", kv[0], kv[1])
	}
	return b.String()
}

// captureAnswer asks ruled's handler one check like wrk.lua's and returns a
// floor handler answering its body and every header it set. The answer must
// be a 200 with RateLimit, RateLimit-Policy and Content-Type.
func captureAnswer(h http.Handler) (*floorHandler, error) {
	req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"request":{"ip":"10.0.0.1","method":"GET","path":"/"}}`))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("capturing ruled's check answer: status %d: %s", rec.Code, rec.Body)
	}
	for _, k := range []string{"RateLimit", "RateLimit-Policy", "Content-Type"} {
		if rec.Header().Get(k) == "" {
			return nil, fmt.Errorf("capturing ruled's check answer: no %s header", k)
		}
	}
	f := &floorHandler{body: bytes.Clone(rec.Body.Bytes())}
	keys := make([]string, 0, len(rec.Header()))
	for k := range rec.Header() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range rec.Header()[k] {
			f.header = append(f.header, [2]string{k, v})
		}
	}
	return f, nil
}

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
	return parseScriptCalls(info)
}

// parseScriptCalls sums the EVAL and EVALSHA calls in INFO commandstats.
func parseScriptCalls(info string) int64 {
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

func redisCPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	return parseRedisCPU(info)
}

// parseRedisCPU is used_cpu_sys + used_cpu_user from INFO cpu: the Redis
// server process's CPU time so far.
func parseRedisCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		total += s
		found++
	}
	if found != 2 {
		return 0, errors.New("INFO cpu has no used_cpu_sys and used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}

// parseOnly is the set of scenarios -only selects: every one when empty.
func parseOnly(only string) (map[string]bool, error) { return parseSelection(only, scenarioNames) }

// parseSelection is the set of names that only (comma-separated) selects
// among known: every one when empty.
func parseSelection(only string, known []string) (map[string]bool, error) {
	sel := make(map[string]bool, len(known))
	if strings.TrimSpace(only) == "" {
		for _, n := range known {
			sel[n] = true
		}
		return sel, nil
	}
	for _, n := range strings.Split(only, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("-only: unknown scenario %q (known: %s)", n, strings.Join(known, ", "))
		}
		sel[n] = true
	}
	return sel, nil
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

// median is the median of xs (the mean of the two middle values for an even
// count), NaN for none. xs is not modified.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// medianRound is the round whose rate is the median of the rounds that ran
// (the lower middle one for an even count), nil if none ran.
func medianRound(rs []*result) *result {
	var ran []*result
	for _, r := range rs {
		if r != nil {
			ran = append(ran, r)
		}
	}
	if len(ran) == 0 {
		return nil
	}
	slices.SortStableFunc(ran, func(a, b *result) int {
		switch ra, rb := a.rate(), b.rate(); {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return 0
	})
	return ran[(len(ran)-1)/2]
}

// roundRatios is, for every round in which both ran, num's rate over den's
// rate in that round.
func roundRatios(num, den []*result) []float64 { return roundRatiosOf(num, den, (*result).rate) }

// roundRatiosOf is, for every round in which both ran, f of num over f of
// den in that round (rounds where f of den is not positive are left out).
func roundRatiosOf(num, den []*result, f func(*result) float64) []float64 {
	var out []float64
	for i := range min(len(num), len(den)) {
		if num[i] == nil || den[i] == nil || f(den[i]) <= 0 {
			continue
		}
		out = append(out, f(num[i])/f(den[i]))
	}
	return out
}

// row is one scenario's line in the report. NaN means not applicable.
type row struct {
	rounds                    int // rounds that ran
	rate, rateMin, rateMax    float64
	vsCeiling                 float64
	p50, p99, p999            time.Duration
	callsPerDecision          float64
	harnessUs, redisUs, wrkUs float64 // CPU µs per decision, median over rounds
	errors                    int64   // over every round
}

// summarize reduces one scenario's rounds (nil where it failed) to a row;
// ceiling is the ceiling's rounds, nil if it did not run.
func summarize(rs, ceiling []*result) row {
	nan := math.NaN()
	w := row{rate: nan, rateMin: nan, rateMax: nan, vsCeiling: nan,
		callsPerDecision: nan, harnessUs: nan, redisUs: nan, wrkUs: nan}
	var rates, harness, redisUs, wrkUs []float64
	var calls, decisions int64
	for _, r := range rs {
		if r == nil {
			continue
		}
		w.rounds++
		rates = append(rates, r.rate())
		calls += r.calls
		decisions += r.decisions
		w.errors += r.errors
		if r.decisions > 0 {
			d := float64(r.decisions)
			harness = append(harness, float64(r.harnessCPU.Microseconds())/d)
			if r.redisCPU >= 0 {
				redisUs = append(redisUs, float64(r.redisCPU.Microseconds())/d)
			}
			if r.wrk {
				wrkUs = append(wrkUs, float64(r.wrkCPU.Microseconds())/d)
			}
		}
	}
	if w.rounds == 0 {
		return w
	}
	w.rate = median(rates)
	w.rateMin, w.rateMax = slices.Min(rates), slices.Max(rates)
	w.vsCeiling = median(roundRatios(rs, ceiling))
	m := medianRound(rs)
	w.p50, w.p99, w.p999 = m.percentile(0.50), m.percentile(0.99), m.percentile(0.999)
	if decisions > 0 {
		w.callsPerDecision = float64(calls) / float64(decisions)
	}
	w.harnessUs, w.redisUs, w.wrkUs = median(harness), median(redisUs), median(wrkUs)
	return w
}

// num formats v, or "-" for a figure there is none of (NaN).
func num(v float64, format string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

type reportHeader struct {
	conc     int
	duration time.Duration
	rounds   int
	loadAvg  string
}

func report(w io.Writer, h reportHeader, names []string, results map[string][]*result) {
	fmt.Fprintf(w, "\nconcurrency %d, %v per scenario, %d round(s) interleaved, GOMAXPROCS %d", h.conc, h.duration, h.rounds, runtime.GOMAXPROCS(0))
	if h.loadAvg != "" {
		fmt.Fprintf(w, ", load average %s before the run", h.loadAvg)
	}
	fmt.Fprint(w, "\n\n")
	ms := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	rows := make([]row, len(names))
	labels := make([]string, len(names))
	width := len("scenario") // every column is right-aligned but the first: pad the names to one width
	for i, n := range names {
		rows[i] = summarize(results[n], results[scRedisPipelined])
		labels[i] = n
		if r := rows[i].rounds; r > 0 && r < h.rounds {
			labels[i] += fmt.Sprintf(" (%d/%d rounds)", r, h.rounds)
		}
		width = max(width, len(labels[i]))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tdecisions/s\tmin–max\tvs ceiling\tp50\tp99\tp999\tredis calls/dec\tharness µs/dec\tredis µs/dec\twrk µs/dec\terrors\t\n", width, "scenario")
	for i, r := range rows {
		if r.rounds == 0 {
			fmt.Fprintf(tw, "%-*s\tfailed\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\t\n", width, labels[i])
			continue
		}
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.0f–%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", width, labels[i], r.rate, r.rateMin, r.rateMax,
			num(r.vsCeiling, "%.2f"), ms(r.p50), ms(r.p99), ms(r.p999), num(r.callsPerDecision, "%.2f"),
			num(r.harnessUs, "%.1f"), num(r.redisUs, "%.1f"), num(r.wrkUs, "%.1f"), r.errors)
	}
	tw.Flush()
	if ratios := roundRatios(results[scHTTPWrk], results[scHTTPFloor]); len(ratios) > 0 {
		fmt.Fprintf(w, "\nhttp-wrk / http-floor: %.2f (median of per-round ratios, range %.2f–%.2f)\n",
			median(ratios), slices.Min(ratios), slices.Max(ratios))
	}
	fmt.Fprint(w, `
decisions/s: median over the rounds, min–max over the rounds; p50/p99/p999: the median round's.
vs ceiling: median over the rounds of the rate / redis-evalsha-pipelined's rate in the same round.
µs/dec: CPU time per decision, median over the rounds. harness: this process (getrusage RUSAGE_SELF, every
  thread); for the in-process scenarios (redis-*, engine*, http) it includes the load generation (the calling
  goroutines, go-redis, Go's HTTP client), for wrk's it is the HTTP server alone (ruled or the floor).
  redis: INFO cpu used_cpu_user + used_cpu_sys. wrk: wrk's user + sys time.
http-floor: net/http on loopback answering a check answer captured from ruled (same headers and body), driven
  by wrk like http-wrk: no routing, no JSON decoding, no rules, no Redis.
`)
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
