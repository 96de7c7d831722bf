package main

// The in-process harness (the default mode): the raw ceiling, the engine
// and the HTTP API in this process, against one Redis.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
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

// rulesYAML is the in-process scenarios' rule file: one fixed-window rule
// over request.ip that lets every request through, as in the drivers' and
// A/B modes.
var rulesYAML = ruleYAML("", "bench", "fixedwindow", fixedWindowConfig)

// capabilityOptions are the options of the engines' capabilities, and of
// the one the raw scenarios' command lines come from (rawCommands).
func capabilityOptions(log *slog.Logger, pipeline bool) capability.Options {
	o := capability.Options{Timeout: time.Second, Logger: log}
	if pipeline {
		o.Pipeline = redis.DefaultBlockingAutoPipelineOptions()
	}
	return o
}

// newEngine returns an engine over client with the built-ins and the rules
// at rulesPath, their scripts loaded; pipeline autopipelines its calls, as
// ruled serve does.
func newEngine(ctx context.Context, client redis.UniversalClient, log *slog.Logger, rulesPath string, pipeline bool) (*host.Engine, error) {
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capabilityOptions(log, pipeline)), Plugins: builtin.All(), Logger: log})
	if err != nil {
		return nil, err
	}
	if _, err := e.Load(context.Background(), rulesPath); err != nil {
		return nil, err
	}
	return e, e.Preload(ctx)
}

// rawCommands returns, for each ip, the command line of the script call
// that the engine's decision of one hit for request.ip ip sends to Redis,
// with the script loaded. It takes each part from where the engine does:
// the rule's subject and config from the rules at rulesPath, the script,
// keys and arguments from the plugin's first step, and the key layout and
// the argument list from the capability (capability.Plugin.Command). The
// raw scenarios send these lines with no ruled in between, so that a
// change of the script, its arguments or the keys moves both sides of the
// comparison alike (TestRawCommandsWriteWhatTheEngineWrites). The decision
// must be one script call whose reply decides.
func rawCommands(ctx context.Context, client redis.UniversalClient, log *slog.Logger, rulesPath string, ips []string) ([][]any, error) {
	set, err := rules.Load(rulesPath, builtin.NewCatalog())
	if err != nil {
		return nil, err
	}
	capab := capability.New(client, capabilityOptions(log, false))
	registered := map[string]*capability.Plugin{}
	out := make([][]any, len(ips))
	for i, ip := range ips {
		sels := set.Match(&rules.Input{Request: rules.Request{IP: ip}})
		if len(sels) != 1 || sels[0].Err != nil {
			return nil, fmt.Errorf("raw command for request.ip %s: want one rule to match, got %d", ip, len(sels))
		}
		sel := sels[0]
		alg := sel.Rule.Algorithm()
		st, ok := alg.(sdk.Steps)
		if !ok {
			return nil, fmt.Errorf("raw command: rule %s: plugin %s does not decide in steps", sel.Rule.Name, sel.Rule.Plugin)
		}
		step, err := st.Start(ctx, sel.Config, sdk.Request{Subject: sel.Subject, Hits: 1})
		if err != nil {
			return nil, fmt.Errorf("raw command: rule %s: %w", sel.Rule.Name, err)
		}
		if step.Final() || !step.Decides {
			return nil, fmt.Errorf("raw command: rule %s: the decision is not one script call", sel.Rule.Name)
		}
		p := registered[sel.Rule.Plugin]
		if p == nil {
			if p, err = capab.Register(sel.Rule.Plugin, alg.Info().Scripts); err != nil {
				return nil, err
			}
			if err := p.Preload(ctx); err != nil {
				return nil, fmt.Errorf("loading the scripts: %w", err)
			}
			registered[sel.Rule.Plugin] = p
		}
		if out[i], err = p.Command(sel.Rule.Name, sel.Subject, step.Script, step.Keys, step.Args...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runInProcess is the default mode: see the package comment.
func runInProcess(c config) error {
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

	// The engine's script calls, as it would send them, without it.
	if selected[scRedis] || selected[scRedisPipelined] {
		raw, err := rawCommands(ctx, client, log, rulesPath, ips)
		if err != nil {
			return err
		}
		inProcess(scRedis, func(i int) error { return client.Do(ctx, raw[i%len(raw)]...).Err() })
		if selected[scRedisPipelined] {
			ap, err := autoPipeliner(client)
			if err != nil {
				return err
			}
			// The pipelined ceiling: EVALSHA submitted to go-redis's
			// autopipeliner (deferred face) and waited for, as the
			// capability does, without it.
			inProcess(scRedisPipelined, func(i int) error {
				cmd := redis.NewCmd(ctx, raw[i%len(raw)]...)
				if err := ap.Submit(ctx, cmd).Wait(); err != nil {
					return err
				}
				return cmd.Err()
			})
		}
	}
	for _, name := range []string{scEngine, scEnginePipe} {
		if !selected[name] {
			continue
		}
		e, err := newEngine(ctx, client, log, rulesPath, name == scEnginePipe)
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
		if wrk, err = findWrk(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "%s and %s skipped: %v\n", scHTTPWrk, scHTTPFloor, err)
		}
	}
	needRuled := selected[scHTTP] || (wrk != nil && selected[scHTTPWrk])
	if needRuled || (wrk != nil && selected[scHTTPFloor]) {
		e, err := newEngine(ctx, client, log, rulesPath, true)
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

// parseOnly is the set of scenarios -only selects: every one when empty.
func parseOnly(only string) (map[string]bool, error) { return parseSelection(only, scenarioNames) }

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
