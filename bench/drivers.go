package main

// The drivers mode (-drivers): the same decisions through each plugin
// driver, each in a real `ruled serve` daemon, over HTTP.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Driver scenario names, in the order each round runs them.
const (
	drNative      = "native"             // fixedwindow linked into ruled
	drWasm        = "wasm-builtin"       // the same built-in through --builtins=wasm
	drProcess     = "process"            // the same built-in as a process plugin
	drTokenbucket = "native-tokenbucket" // tokenbucket linked into ruled
	drGCRA        = "wasm-gcra"          // examples/plugins/gcra as a Wasm plugin
)

var driverNames = []string{drNative, drWasm, drProcess, drTokenbucket, drGCRA}

// blackBoxNames are the scenarios the black-box pass drives (issue 41: the
// built-in natively and through the Wasm driver).
var blackBoxNames = []string{drNative, drWasm}

// blackBoxLoad is the drivers mode's black-box pass: wrk with one thread,
// -concurrency connections, for duration, over subjects client IPs; a load
// generator outside the harness's process, as an operator would run one.
type blackBoxLoad struct {
	duration time.Duration
	subjects int
}

// driverScenario is one daemon: its rule file and the serve flags beyond
// --rules, --listen and --redis.
type driverScenario struct {
	name  string
	base  string // the native scenario its ratios are taken against; "" for a native one
	rules string
	args  []string
}

// Both configs let every request through: the benchmark measures the
// decision, not denials. The rate-based pair allows a billion a second with
// a burst of a million, within both plugins' exact-arithmetic bounds.
const (
	fixedWindowConfig = "{limit: 1000000000, window: 1h}"
	rateConfig        = "{rate: 1000000000, per: 1s, burst: 1000000}"
)

// ruleYAML is a rule file with one rule name over request.ip, preceded by
// plugins (a plugins: block, or "").
func ruleYAML(plugins, name, plugin, config string) string {
	return plugins + "rules:\n  - name: " + name + "\n    subject: request.ip\n    plugin: " + plugin + "\n    config: " + config + "\n"
}

// driverScenarios are the daemons, with the build outputs under dir (see
// buildDrivers).
func driverScenarios(dir string) []driverScenario {
	return []driverScenario{
		{name: drNative, rules: ruleYAML("", drNative, "fixedwindow", fixedWindowConfig)},
		{name: drWasm, base: drNative, rules: ruleYAML("", drWasm, "fixedwindow", fixedWindowConfig),
			args: []string{"--builtins=wasm", "--plugins-dir", filepath.Join(dir, "plugins")}},
		{name: drProcess, base: drNative, rules: ruleYAML("plugins:\n  fixedwindow-process: {process: ./fixedwindow-process}\n",
			drProcess, "fixedwindow-process", fixedWindowConfig)},
		{name: drTokenbucket, rules: ruleYAML("", drTokenbucket, "tokenbucket", rateConfig)},
		{name: drGCRA, base: drTokenbucket, rules: ruleYAML("plugins:\n  gcra: {wasm: ./gcra.wasm}\n", drGCRA, "gcra", rateConfig)},
	}
}

// buildDrivers builds, once for the whole run, into dir: the ruled binary,
// the fixedwindow built-in as a Wasm module where --plugins-dir dir/plugins
// finds it, the gcra example as dir/gcra.wasm (both with `ruled plugin
// build`, as docs/plugins.md has it) and fixedwindow as a process plugin,
// dir/fixedwindow-process. root is the repository's root. It returns the
// ruled binary's path.
func buildDrivers(ctx context.Context, root, dir string) (string, error) {
	ruled := filepath.Join(dir, "ruled")
	steps := []struct {
		name string
		args []string
	}{
		{"go", []string{"build", "-o", ruled, "./cmd/ruled"}},
		{ruled, []string{"plugin", "build", "./plugins/fixedwindow/wasm", "-o", filepath.Join(dir, "plugins", "fixedwindow.wasm")}},
		{ruled, []string{"plugin", "build", "./examples/plugins/gcra/wasm", "-o", filepath.Join(dir, "gcra.wasm")}},
		{"go", []string{"build", "-o", filepath.Join(dir, "fixedwindow-process"), "./bench/fwprocess"}},
	}
	if err := os.MkdirAll(filepath.Join(dir, "plugins"), 0o700); err != nil {
		return "", fmt.Errorf("building: %w", err)
	}
	for _, s := range steps {
		start := time.Now()
		cmd := exec.CommandContext(ctx, s.name, s.args...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building: %s %s: %w\n%s", filepath.Base(s.name), strings.Join(s.args, " "), err, out)
		}
		fmt.Fprintf(os.Stderr, "built: %s %s (%v)\n", filepath.Base(s.name), strings.Join(s.args, " "), time.Since(start).Round(100*time.Millisecond))
	}
	return ruled, nil
}

// repoRoot is the directory of the ruled module's go.mod, which the
// harness must be run from (or below).
func repoRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	if _, err := os.Stat(filepath.Join(root, "cmd", "ruled")); err != nil {
		return "", fmt.Errorf("run from the ruled repository (the module at %s has no cmd/ruled): %w", root, err)
	}
	return root, nil
}

// driverRound is one scenario's figures in one round.
type driverRound struct {
	high *result // at -concurrency (with Redis and harness CPU and calls)
	low  *result // at concurrency 1

	daemonCPU time.Duration // ruled's user+sys time during the high-load pass
	pluginCPU time.Duration // its child processes' (a process plugin)
	rssKB     int64         // ruled's VmRSS at the end of the high-load pass
	pluginKB  int64         // its child processes' VmRSS then
	instances float64       // ruled_plugin_pool_instances then: Wasm instances, idle and busy; NaN if unknown
	heapMB    float64       // go_memstats_heap_inuse_bytes then, in MiB; NaN if unknown

	box      *result       // the black-box pass (wrk), nil when it did not run
	boxCPU   time.Duration // ruled's user+sys time during it
	boxRSSKB int64         // ruled's VmRSS at its end
}

// blackBox runs the black-box pass on d and records it in dr.
func blackBox(ctx context.Context, w *wrkRunner, d *daemon, load blackBoxLoad, conc int, dr *driverRound) error {
	cpu0, _, err := treeCPU(d.pid())
	if err != nil {
		return err
	}
	r, _, err := w.runScript(ctx, w.script, d.url, load.duration, conc, strconv.Itoa(load.subjects))
	if err != nil {
		return err
	}
	cpu1, _, err := treeCPU(d.pid())
	if err != nil {
		return err
	}
	self, _, err := treeMem(d.pid())
	if err != nil {
		return err
	}
	dr.box, dr.boxCPU, dr.boxRSSKB = r, cpu1-cpu0, self.rssKB
	return nil
}

// runDrivers is the drivers mode: see the package comment.
func runDrivers(c config) error {
	selected, err := parseSelection(c.only, driverNames)
	if err != nil {
		return err
	}
	loadAvg := readLoadAvg()
	ctx := context.Background()
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ruled-drivers-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer os.RemoveAll(dir)
	ruled, err := buildDrivers(ctx, root, dir)
	if err != nil {
		return err
	}

	st, redisURL, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()
	client := st.Client()

	var daemons []*daemon
	defer func() {
		for _, d := range daemons {
			d.stop()
		}
	}()
	var wrk *wrkRunner
	if c.blackBox.duration > 0 {
		if wrk, err = findWrk(ctx); err != nil {
			return fmt.Errorf("-black-box: %w", err)
		}
		wrk.threads = 1
	}
	bodies := checkBodies(c.subjects)
	for _, sc := range driverScenarios(dir) {
		if !selected[sc.name] {
			continue
		}
		start := time.Now()
		d, err := startDaemon(ctx, ruled, dir, redisURL, sc, c.conc)
		if err != nil {
			return err
		}
		daemons = append(daemons, d)
		if err := d.check(bodies[0]); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "started: %-20s pid %d, ready in %v\n", sc.name, d.pid(), time.Since(start).Round(10*time.Millisecond))
	}
	// Warm every daemon up (Wasm instances, connection pools, the Go
	// runtime's heap) outside the measurement.
	warm := min(c.duration, 2*time.Second)
	for _, d := range daemons {
		d.load(bodies, c.conc, warm)
	}

	rounds := make(map[string][]*driverRound, len(daemons))
	for round := 1; round <= c.rounds; round++ {
		for _, d := range daemons {
			dr := &driverRound{}
			r, err := measure(ctx, client, scenario{name: d.sc.name, run: func() (*result, error) {
				cpu0, child0, err := treeCPU(d.pid())
				if err != nil {
					return nil, err
				}
				r := d.load(bodies, c.conc, c.duration)
				cpu1, child1, err := treeCPU(d.pid())
				if err != nil {
					return nil, err
				}
				self, kids, err := treeMem(d.pid())
				if err != nil {
					return nil, err
				}
				dr.daemonCPU, dr.pluginCPU = cpu1-cpu0, max(0, child1-child0)
				dr.rssKB, dr.pluginKB = self.rssKB, kids.rssKB
				if dr.instances, dr.heapMB, err = d.poolAndHeap(); err != nil {
					return nil, err
				}
				return r, nil
			}})
			if err != nil {
				fmt.Fprintf(os.Stderr, "round %d/%d  %-20s failed: %v\n", round, c.rounds, d.sc.name, err)
				rounds[d.sc.name] = append(rounds[d.sc.name], nil)
				continue
			}
			dr.high = r
			rounds[d.sc.name] = append(rounds[d.sc.name], dr)
			fmt.Fprintf(os.Stderr, "round %d/%d  %-20s %8.0f/s  p99 %v\n", round, c.rounds, d.sc.name, r.rate(), r.percentile(0.99).Round(10*time.Microsecond))
		}
		// The black-box pass: wrk, outside this process.
		for _, d := range daemons {
			dr := rounds[d.sc.name][round-1]
			if wrk == nil || dr == nil || !slices.Contains(blackBoxNames, d.sc.name) {
				continue
			}
			if err := blackBox(ctx, wrk, d, c.blackBox, c.conc, dr); err != nil {
				fmt.Fprintf(os.Stderr, "round %d/%d  %-20s black box failed: %v\n", round, c.rounds, d.sc.name, err)
				continue
			}
			fmt.Fprintf(os.Stderr, "round %d/%d  %-20s black box %6.0f/s  p99 %v\n", round, c.rounds, d.sc.name, dr.box.rate(),
				dr.box.percentile(0.99).Round(10*time.Microsecond))
		}
		// The low-load pass: one connection, for the latency of a lone request.
		for _, d := range daemons {
			runtime.GC()
			if dr := rounds[d.sc.name][round-1]; dr != nil {
				dr.low = d.load(bodies, 1, c.lowDuration)
				fmt.Fprintf(os.Stderr, "round %d/%d  %-20s low load %6.0f/s  p50 %v\n", round, c.rounds, d.sc.name, dr.low.rate(),
					dr.low.percentile(0.50).Round(time.Microsecond))
			}
		}
	}

	rows := make([]driverRow, 0, len(daemons))
	for _, d := range daemons {
		w := summarizeDriver(d.sc.name, d.sc.base, rounds[d.sc.name], rounds[d.sc.base])
		if self, kids, err := treeMem(d.pid()); err == nil {
			w.HWMMB, w.PluginHWMMB = mib(self.hwmKB), mib(kids.hwmKB)
			w.PeakMB = nanMax(w.PeakMB, w.HWMMB)
		}
		rows = append(rows, w)
	}
	h := reportHeader{conc: c.conc, duration: c.duration, rounds: c.rounds, loadAvg: loadAvg}
	if c.json {
		return reportDriversJSON(os.Stdout, h, c.lowDuration, c.blackBox, rows)
	}
	reportDrivers(os.Stdout, h, c.lowDuration, c.blackBox, rows)
	return nil
}

// nanMax is the larger of a and b, ignoring a NaN.
func nanMax(a, b float64) float64 {
	switch {
	case math.IsNaN(a):
		return b
	case math.IsNaN(b):
		return a
	}
	return math.Max(a, b)
}

func mib(kb int64) float64 {
	if kb <= 0 {
		return math.NaN()
	}
	return float64(kb) / 1024
}

// driverRow is one scenario's line in the drivers report. NaN means not
// measured or not applicable.
type driverRow struct {
	Name, Base string
	Rounds     int // rounds that ran

	Rate, RateMin, RateMax float64 // requests/s at -concurrency
	RateVsBase             float64 // median over the rounds of rate / base's rate in the same round
	P50, P99               time.Duration
	P99VsBase              float64 // median over the rounds of p99 / base's p99 in the same round
	LowP50, LowP99         time.Duration

	// CPU µs per request, median over the rounds.
	RuledUs, PluginUs, RedisUs, ClientUs float64
	CallsPerReq                          float64
	CPUVsBase                            float64 // median over the rounds of ruled's CPU per request / base's in the same round

	RSSMB, PluginRSSMB float64 // VmRSS at the end of the last round's high-load pass
	PeakMB             float64 // the most of VmHWM at the end of the run and every round's VmRSS
	HWMMB, PluginHWMMB float64 // VmHWM at the end of the run
	Instances, HeapMB  float64 // Wasm instances and Go heap in use at the end of the last round's load
	Errors             int64

	Box boxRow // the black-box pass; Box.Rounds is 0 when it did not run
}

// boxRow is a scenario's black-box figures, as driverRow's.
type boxRow struct {
	Rounds                           int
	Rate, RateMin, RateMax           float64
	RateVsBase, P99VsBase, CPUVsBase float64
	P50, P99                         time.Duration
	RuledUs, RSSMB                   float64
	Errors                           int64
}

// summarizeDriver reduces a scenario's rounds (nil where one failed) to a
// row, with ratios against base's rounds (nil for none).
func summarizeDriver(name, baseName string, rs, base []*driverRound) driverRow {
	nan := math.NaN()
	w := driverRow{Name: name, Base: baseName, Rate: nan, RateMin: nan, RateMax: nan, RateVsBase: nan, P99VsBase: nan, CPUVsBase: nan,
		RuledUs: nan, PluginUs: nan, RedisUs: nan, ClientUs: nan, CallsPerReq: nan,
		RSSMB: nan, PluginRSSMB: nan, PeakMB: nan, HWMMB: nan, PluginHWMMB: nan, Instances: nan, HeapMB: nan}
	var highs, lows []*result
	var rates, ruledUs, pluginUs, redisUs, clientUs []float64
	var calls, decisions int64
	for _, r := range rs {
		if r == nil || r.high == nil {
			continue
		}
		w.Rounds++
		h := r.high
		highs = append(highs, h)
		if r.low != nil {
			lows = append(lows, r.low)
			w.Errors += r.low.errors
		}
		rates = append(rates, h.rate())
		w.Errors += h.errors
		calls += h.calls
		decisions += h.decisions
		if h.decisions > 0 {
			n := float64(h.decisions)
			ruledUs = append(ruledUs, float64(r.daemonCPU.Microseconds())/n)
			pluginUs = append(pluginUs, float64(r.pluginCPU.Microseconds())/n)
			clientUs = append(clientUs, float64(h.harnessCPU.Microseconds())/n)
			if h.redisCPU >= 0 {
				redisUs = append(redisUs, float64(h.redisCPU.Microseconds())/n)
			}
		}
		w.RSSMB, w.PluginRSSMB = mib(r.rssKB), mib(r.pluginKB)
		w.Instances, w.HeapMB = r.instances, r.heapMB
		w.PeakMB = nanMax(w.PeakMB, w.RSSMB)
	}
	if w.Rounds == 0 {
		w.Box = summarizeBox(rs, base)
		return w
	}
	w.Rate, w.RateMin, w.RateMax = median(rates), slices.Min(rates), slices.Max(rates)
	m := medianRound(highs)
	w.P50, w.P99 = m.percentile(0.50), m.percentile(0.99)
	if l := medianRound(lows); l != nil {
		w.LowP50, w.LowP99 = l.percentile(0.50), l.percentile(0.99)
	}
	w.RuledUs, w.PluginUs, w.RedisUs, w.ClientUs = median(ruledUs), median(pluginUs), median(redisUs), median(clientUs)
	if decisions > 0 {
		w.CallsPerReq = float64(calls) / float64(decisions)
	}
	high := func(r *driverRound) *result { return r.high }
	mine, theirs := passOf(rs, high), passOf(base, high)
	w.RateVsBase = median(roundRatios(mine, theirs))
	w.P99VsBase = median(roundRatiosOf(mine, theirs, func(r *result) float64 { return float64(r.percentile(0.99)) }))
	w.CPUVsBase = median(cpuRatios(rs, base, func(r *driverRound) (*result, time.Duration) { return r.high, r.daemonCPU }))
	w.Box = summarizeBox(rs, base)
	return w
}

// cpuRatios is, round by round, ruled's CPU per request in rs over base's,
// for the pass pass picks; rounds where either did not run are left out.
func cpuRatios(rs, base []*driverRound, pass func(*driverRound) (*result, time.Duration)) []float64 {
	var out []float64
	for i, r := range rs {
		if r == nil || i >= len(base) || base[i] == nil {
			continue
		}
		mine, myCPU := pass(r)
		theirs, theirCPU := pass(base[i])
		if mine == nil || theirs == nil || mine.decisions == 0 || theirs.decisions == 0 || theirCPU == 0 {
			continue
		}
		out = append(out, (float64(myCPU)/float64(mine.decisions))/(float64(theirCPU)/float64(theirs.decisions)))
	}
	return out
}

// summarizeBox reduces the black-box passes of rs to a row, with ratios
// against base's.
func summarizeBox(rs, base []*driverRound) boxRow {
	nan := math.NaN()
	b := boxRow{Rate: nan, RateMin: nan, RateMax: nan, RateVsBase: nan, P99VsBase: nan, CPUVsBase: nan, RuledUs: nan, RSSMB: nan}
	var rates, ruledUs []float64
	var ran []*result
	for _, r := range rs {
		if r == nil || r.box == nil {
			continue
		}
		b.Rounds++
		ran = append(ran, r.box)
		rates = append(rates, r.box.rate())
		b.Errors += r.box.errors
		if r.box.decisions > 0 {
			ruledUs = append(ruledUs, float64(r.boxCPU.Microseconds())/float64(r.box.decisions))
		}
		b.RSSMB = mib(r.boxRSSKB)
	}
	if b.Rounds == 0 {
		return b
	}
	b.Rate, b.RateMin, b.RateMax = median(rates), slices.Min(rates), slices.Max(rates)
	m := medianRound(ran)
	b.P50, b.P99 = m.percentile(0.50), m.percentile(0.99)
	b.RuledUs = median(ruledUs)
	box := func(r *driverRound) *result { return r.box }
	mine, theirs := passOf(rs, box), passOf(base, box)
	b.RateVsBase = median(roundRatios(mine, theirs))
	b.P99VsBase = median(roundRatiosOf(mine, theirs, func(r *result) float64 { return float64(r.percentile(0.99)) }))
	b.CPUVsBase = median(cpuRatios(rs, base, func(r *driverRound) (*result, time.Duration) { return r.box, r.boxCPU }))
	return b
}

// passOf is one pass of each round, as pick takes it (the high-load or
// the black-box pass), nil where the round did not run.
func passOf(rounds []*driverRound, pick func(*driverRound) *result) []*result {
	out := make([]*result, len(rounds))
	for i, r := range rounds {
		if r != nil {
			out[i] = pick(r)
		}
	}
	return out
}

// target is one of issues 18's and 41's bounds, checked against a run.
type target struct {
	What     string `json:"what"`
	Measured string `json:"measured"`
	Holds    bool   `json:"holds"`
}

// driverTargets checks the targets against rows. Issue 41's, for the
// built-in through the Wasm driver, in the harness and in the black-box
// pass: at least 0.9 of native throughput, at most 1.5 times its p99 and
// 1.15 times its CPU per request, at most 60 MB of daemon RSS. Issue 18's,
// for the gcra Wasm plugin: at least 0.8 of native tokenbucket's
// throughput, at most twice its p99, at most 100 MB of RSS; for the process
// plugin: at least 0.4 of native throughput and a p50 under 0.5 ms at low
// load. A target whose scenario or pass did not run is left out.
func driverTargets(rows []driverRow) []target {
	byName := make(map[string]driverRow, len(rows))
	for _, r := range rows {
		if r.Rounds > 0 {
			byName[r.Name] = r
		}
	}
	var out []target
	ratio := func(name, what string, v, bound float64, atLeast bool) {
		if math.IsNaN(v) {
			return
		}
		holds := v <= bound
		if atLeast {
			holds = v >= bound
		}
		out = append(out, target{What: fmt.Sprintf("%s %s", name, what), Measured: fmt.Sprintf("%.3f", v), Holds: holds})
	}
	mb := func(name, what string, v, bound float64) {
		if !math.IsNaN(v) {
			out = append(out, target{What: fmt.Sprintf("%s daemon RSS ≤ %.0f MB (%s)", name, bound, what), Measured: fmt.Sprintf("%.1f MB", v), Holds: v <= bound})
		}
	}
	if r, ok := byName[drWasm]; ok {
		ratio(drWasm, "throughput ≥ 0.9 × "+r.Base, r.RateVsBase, 0.9, true)
		ratio(drWasm, "p99 ≤ 1.5 × "+r.Base, r.P99VsBase, 1.5, false)
		ratio(drWasm, "CPU per request ≤ 1.15 × "+r.Base, r.CPUVsBase, 1.15, false)
		mb(drWasm, "VmRSS after the load", r.RSSMB, 60)
		mb(drWasm, "peak", r.PeakMB, 60)
		if r.Box.Rounds > 0 {
			ratio(drWasm, "black box: throughput ≥ 0.9 × "+r.Base, r.Box.RateVsBase, 0.9, true)
			ratio(drWasm, "black box: p99 ≤ 1.5 × "+r.Base, r.Box.P99VsBase, 1.5, false)
			ratio(drWasm, "black box: CPU per request ≤ 1.15 × "+r.Base, r.Box.CPUVsBase, 1.15, false)
			mb(drWasm, "black box, VmRSS after the load", r.Box.RSSMB, 60)
		}
	}
	if r, ok := byName[drGCRA]; ok {
		ratio(drGCRA, "throughput ≥ 0.8 × "+r.Base, r.RateVsBase, 0.8, true)
		ratio(drGCRA, "p99 ≤ 2 × "+r.Base, r.P99VsBase, 2, false)
		mb(drGCRA, "VmRSS after the load", r.RSSMB, 100)
		mb(drGCRA, "peak", r.PeakMB, 100)
	}
	if r, ok := byName[drProcess]; ok {
		ratio(drProcess, "throughput ≥ 0.4 × "+r.Base, r.RateVsBase, 0.4, true)
		if r.LowP50 > 0 {
			out = append(out, target{What: drProcess + " p50 < 0.5 ms at concurrency 1", Measured: r.LowP50.Round(time.Microsecond).String(),
				Holds: r.LowP50 < 500*time.Microsecond})
		}
	}
	return out
}

func reportDrivers(w io.Writer, h reportHeader, lowDur time.Duration, box blackBoxLoad, rows []driverRow) {
	fmt.Fprintf(w, "\nruled serve per driver: concurrency %d, %v per scenario, low load 1 connection for %v, %d round(s) interleaved, %d CPUs",
		h.conc, h.duration, lowDur, h.rounds, runtime.NumCPU())
	if h.loadAvg != "" {
		fmt.Fprintf(w, ", load average %s before the run", h.loadAvg)
	}
	fmt.Fprint(w, "\n\n")
	ms := func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
	}
	width := len("scenario")
	labels := make([]string, len(rows))
	for i, r := range rows {
		labels[i] = r.Name
		if r.Rounds > 0 && r.Rounds < h.rounds {
			labels[i] += fmt.Sprintf(" (%d/%d rounds)", r.Rounds, h.rounds)
		}
		width = max(width, len(labels[i]))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\treq/s\tmin–max\t×base\tp50\tp99\tp99×base\tlow p50\tlow p99\truled µs\tplugin µs\tredis µs\tclient µs\tcalls/req\tRSS MB\tpeak MB\tGo heap MB\tWasm inst\tplugin RSS MB\terrors\t\n", width, "scenario")
	for i, r := range rows {
		if r.Rounds == 0 {
			fmt.Fprintf(tw, "%-*s\tfailed\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", width, labels[i])
			continue
		}
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.0f–%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", width, labels[i],
			r.Rate, r.RateMin, r.RateMax, num(r.RateVsBase, "%.2f"), ms(r.P50), ms(r.P99), num(r.P99VsBase, "%.2f"),
			ms(r.LowP50), ms(r.LowP99), num(r.RuledUs, "%.1f"), num(r.PluginUs, "%.1f"), num(r.RedisUs, "%.1f"), num(r.ClientUs, "%.1f"),
			num(r.CallsPerReq, "%.2f"), num(r.RSSMB, "%.1f"), num(r.PeakMB, "%.1f"), num(r.HeapMB, "%.1f"), num(r.Instances, "%.0f"),
			num(r.PluginRSSMB, "%.1f"), r.Errors)
	}
	tw.Flush()
	if box.duration > 0 {
		fmt.Fprintf(w, "\nblack box: wrk -t1 -c%d -d%v over %d client IPs, after each round's pass above\n\n", h.conc, box.duration, box.subjects)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "%-*s\treq/s\tmin–max\t×base\tp50\tp99\tp99×base\truled µs\tCPU×base\tRSS MB\terrors\t\n", width, "scenario")
		for i, r := range rows {
			if b := r.Box; b.Rounds > 0 {
				fmt.Fprintf(tw, "%-*s\t%.0f\t%.0f–%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", width, labels[i], b.Rate, b.RateMin, b.RateMax,
					num(b.RateVsBase, "%.2f"), ms(b.P50), ms(b.P99), num(b.P99VsBase, "%.2f"), num(b.RuledUs, "%.1f"),
					num(b.CPUVsBase, "%.2f"), num(b.RSSMB, "%.1f"), b.Errors)
			}
		}
		tw.Flush()
	}
	if ts := driverTargets(rows); len(ts) > 0 {
		fmt.Fprint(w, "\ntargets (issue 41 for wasm-builtin, issue 18 for the others):\n")
		for _, t := range ts {
			verdict := "holds"
			if !t.Holds {
				verdict = "MISSES"
			}
			fmt.Fprintf(w, "  %-66s %10s  %s\n", t.What, t.Measured, verdict)
		}
	}
	fmt.Fprint(w, `
One ruled serve daemon per scenario (default flags but --rules, --listen, --redis and the driver's), all against
one redis-server, each kept running through every round; POST /v1/check over 10,000 request.ip subjects from Go's
HTTP client in this process (keep-alive). req/s: median over the rounds, min–max over them; p50/p99: the median
round's; ×base and p99×base: median over the rounds of the ratio to the native scenario of the same round
(native for wasm-builtin and process, native-tokenbucket for wasm-gcra). low p50/p99: one connection, the median
round's. µs: CPU time per request, median over the rounds: ruled (/proc/PID/stat), its child processes (the
process plugin), Redis (INFO cpu), this process (getrusage: the load generator); CPU×base: median over the rounds
of ruled's CPU per request over the native scenario's in the same round. RSS: ruled's VmRSS at the end
of the last round's load; peak: the most of its VmHWM at the end of the run and every round's VmRSS (the
kernel updates VmHWM lazily); Go heap: its go_memstats_heap_inuse_bytes and Wasm inst: the sum of its
ruled_plugin_pool_instances, both from /metrics after the last round's load; plugin RSS: its child processes'.
`)
}

// reportDriversJSON writes the rows and the targets as one JSON object;
// times are in microseconds, sizes in MiB, and what was not measured is null.
func reportDriversJSON(w io.Writer, h reportHeader, lowDur time.Duration, box blackBoxLoad, rows []driverRow) error {
	f := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	us := func(d time.Duration) any {
		if d <= 0 {
			return nil
		}
		return float64(d) / float64(time.Microsecond)
	}
	out := map[string]any{
		"concurrency": h.conc, "duration_s": h.duration.Seconds(), "low_duration_s": lowDur.Seconds(), "rounds": h.rounds,
		"cpus": runtime.NumCPU(), "load_average": h.loadAvg, "targets": driverTargets(rows),
		"black_box_duration_s": box.duration.Seconds(), "black_box_subjects": box.subjects,
	}
	var scenarios []map[string]any
	for _, r := range rows {
		scenarios = append(scenarios, map[string]any{
			"name": r.Name, "base": r.Base, "rounds": r.Rounds, "errors": r.Errors,
			"rate": f(r.Rate), "rate_min": f(r.RateMin), "rate_max": f(r.RateMax), "rate_vs_base": f(r.RateVsBase),
			"p50_us": us(r.P50), "p99_us": us(r.P99), "p99_vs_base": f(r.P99VsBase), "low_p50_us": us(r.LowP50), "low_p99_us": us(r.LowP99),
			"ruled_cpu_us": f(r.RuledUs), "plugin_cpu_us": f(r.PluginUs), "redis_cpu_us": f(r.RedisUs), "client_cpu_us": f(r.ClientUs),
			"redis_calls_per_req": f(r.CallsPerReq),
			"rss_mib":             f(r.RSSMB),
			"peak_mib":            f(r.PeakMB),
			"hwm_mib":             f(r.HWMMB),
			"go_heap_inuse_mib":   f(r.HeapMB),
			"wasm_instances":      f(r.Instances),
			"plugin_rss_mib":      f(r.PluginRSSMB),
			"plugin_hwm_mib":      f(r.PluginHWMMB),
			"cpu_vs_base":         f(r.CPUVsBase),
			"black_box": map[string]any{"rounds": r.Box.Rounds, "rate": f(r.Box.Rate), "rate_vs_base": f(r.Box.RateVsBase),
				"p50_us": us(r.Box.P50), "p99_us": us(r.Box.P99), "p99_vs_base": f(r.Box.P99VsBase),
				"ruled_cpu_us": f(r.Box.RuledUs), "cpu_vs_base": f(r.Box.CPUVsBase), "rss_mib": f(r.Box.RSSMB), "errors": r.Box.Errors},
		})
	}
	out["scenarios"] = scenarios
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}
