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
// With -ab-rls each build runs as envoy ratelimit instead (`ruled
// envoy-ratelimit` on bench/envoy-config.yaml) and is loaded over gRPC, as
// the envoy mode's RLS allowed load: ShouldRateLimit of one user=N
// descriptor per call, so that changes to the gRPC face are measured.
//
// # Envoy ratelimit
//
// With -envoy SOURCE it compares ruled run as envoy ratelimit (`ruled
// envoy-ratelimit`, built from this repository) with envoy ratelimit built
// from SOURCE, a checkout of github.com/envoyproxy/ratelimit (nothing is
// fetched at run time; SOURCE may also name a binary built from it). Both
// read one envoy config directory with the same environment, share one
// private redis-server, and are driven in turn, each going first in turn,
// over both of envoy ratelimit's faces: gRPC (Envoy's
// ShouldRateLimit, one descriptor per call, from a grpc-go client) and
// HTTP (POST /json from wrk), each under two loads, every call allowed and
// every other call denied (keys under a limit of 1 that setup exhausts).
// For each it reports decisions per second, p50 and p99, each server's CPU
// per decision and Redis's, Redis reads per decision (below 1 when calls
// share pipelined reads), each server's peak RSS, and ruled's ratios to
// envoy ratelimit round by round. A third server under the same loads is
// the protocol floor (floor.go): the bench binary itself, serving both
// faces with the libraries ruled uses and canned answers, so that each
// server's CPU above it, its own, is compared too:
//
//	git clone https://github.com/envoyproxy/ratelimit /tmp/envoy-ratelimit
//	go run ./bench -envoy /tmp/envoy-ratelimit -concurrency 64 -rounds 5 -duration 5s
//
// With -http-floor it measures what another HTTP server would save: the
// floor's HTTP face served by net/http, with ruled's time-outs, by fasthttp
// under the same time-outs and body limit, and by fasthttp through its
// net/http adaptor, each loaded with the envoy mode's two HTTP loads in
// turn; it reports each one's requests per second, p50, p99 and CPU per
// request, and the others' share of net/http's CPU round by round:
//
//	go run ./bench -http-floor -concurrency 64 -rounds 5 -duration 5s
//
// With -scale N,N,... as well it measures the two as cores grow (issue
// 43): for each N both run pinned to N CPUs with GOMAXPROCS=N, the private
// redis-server to -redis-cpus, the load (this process and wrk) to
// -load-cpus, and each takes the allowed loads over HTTP and gRPC; it
// reports, per N, decisions/s, the cores each server used, server and
// Redis CPU per decision, how busy Redis's core was, ruled's ratio to
// envoy ratelimit round by round and each one's growth from the first N. It
// needs 1 + max(N) CPUs and some for the load:
//
//	go run ./bench -envoy /tmp/envoy-ratelimit -scale 1,2,4,8 -concurrency 256 -rounds 3 -duration 5s
//
// # Script cost
//
// With -script-cost it measures where Redis's time per decision goes: a
// bare script call, a decision's reply, TIME, ruled's prelude and reply cap,
// and fixedwindow's production script, each row one piece more than the
// one above, and tokenbucket's production script and envoy ratelimit's two
// plain commands beside them; each step is driven through go-redis's
// autopipeliner, as the capability sends calls, and reports Redis's CPU per
// call and its time inside the commands:
//
//	go run ./bench -script-cost -concurrency 64 -rounds 5 -duration 3s
//
// # RLQS
//
// With -rlqs N it measures ruled's rate limit quota service: N simulated
// Envoy filters (examples/clients/rlqs, reporting every second, denying
// while a bucket has no assignment), each on its own gRPC connection and
// deciding in a loop over 10 buckets, against
// one `ruled serve --rlqs-listen` built from this repository, under an
// ample quota (every decision allowed) and a scarce one (1000 per tenant,
// spent in the run). It reports decisions a second per client, reports,
// assignments and Redis calls a second, ruled's and Redis's CPU, and what
// the clients admitted of each scarce tenant's limit:
//
//	go run ./bench -rlqs 8 -rounds 3 -duration 5s
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
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

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
	blackBox    blackBoxLoad  // the drivers mode's black-box pass; off when its duration is 0

	ab    string // the A/B mode's LABEL=BINARY list
	abRLS bool   // the A/B mode over envoy ratelimit's gRPC face

	envoy string // the envoy mode's envoy ratelimit source tree or binary

	scriptCost bool // the script-cost mode

	scale     string // the scale mode's core counts
	redisCPUs string // the scale mode's CPUs for Redis
	loadCPUs  string // the scale mode's CPUs for the load; empty: those left

	httpFloor bool   // the http-floor mode
	rlqs      int    // the rlqs mode's clients
	floorHTTP string // the HTTP server of -serve-floor: floorNetHTTP, floorFastHTTP or floorAdaptor
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
	flag.DurationVar(&c.blackBox.duration, "black-box", 0, "with -drivers: also drive native and wasm-builtin with wrk -t1 for this long in every round (8s for issue 41's black-box run; 0: no such pass)")
	flag.IntVar(&c.blackBox.subjects, "black-box-subjects", 1000, "with -black-box: the client IPs wrk's requests cycle through")
	flag.BoolVar(&c.abRLS, "ab-rls", false, "with -ab: run each build as envoy ratelimit and load it over gRPC (ShouldRateLimit) instead of POST /v1/check")
	flag.StringVar(&c.ab, "ab", "", "compare builds of ruled instead: LABEL=BINARY,LABEL=BINARY,... all loaded at once, ruled's CPU per check (see the package comment)")
	flag.StringVar(&c.envoy, "envoy", "", "compare ruled envoy-ratelimit with envoy ratelimit built from this source tree (or this binary built from it; see the package comment)")
	flag.BoolVar(&c.scriptCost, "script-cost", false, "measure Redis's time per call piece by piece, from a bare script call to fixedwindow's (see the package comment)")
	flag.StringVar(&c.scale, "scale", "", "with -envoy: compare the two as the cores they are given grow, these core counts (1,2,4,8; see the package comment)")
	flag.StringVar(&c.redisCPUs, "redis-cpus", "0", "with -scale: the CPUs of the redis-server")
	flag.StringVar(&c.loadCPUs, "load-cpus", "", "with -scale: the CPUs of the load (default: those neither Redis's nor the servers')")
	flag.IntVar(&c.rlqs, "rlqs", 0, "measure the RLQS face instead: this many simulated Envoy filters against one ruled serve --rlqs-listen, decisions a second per client (see the package comment)")
	flag.BoolVar(&c.httpFloor, "http-floor", false, "measure the protocol floor's HTTP face served by net/http, by fasthttp and through fasthttp's net/http adaptor (see the package comment)")
	flag.StringVar(&c.floorHTTP, "floor-http", floorNetHTTP, "with -serve-floor: the HTTP server, "+floorNetHTTP+", "+floorFastHTTP+" or "+floorAdaptor)
	floor := flag.Bool("serve-floor", false, "serve envoy ratelimit's faces on its environment's ports with canned answers: the envoy mode's protocol floor, which the harness starts itself")
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
	runMode := runInProcess
	switch {
	case *floor:
		runMode = runFloor
	case c.ab != "":
		runMode = runAB
	case c.scale != "":
		runMode = runScale
	case c.envoy != "":
		runMode = runEnvoy
	case c.drivers:
		runMode = runDrivers
	case c.scriptCost:
		runMode = runScriptCost
	case c.httpFloor:
		runMode = runHTTPFloor
	case c.rlqs > 0:
		runMode = runRLQS
	}
	if err := runMode(c); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

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
