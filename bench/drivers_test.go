package main

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses: fields count from the last ')'.
	line := "4242 (ruled (x) y) S 17 4242 17 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 9 0 100 2000000 3000 18446744073709551615\n"
	st, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.cpu != 2870*time.Millisecond {
		t.Errorf("parseProcStat = %+v, want ppid 17 and 287 ticks (2.87s)", st)
	}
	for _, bad := range []string{"", "1 ruled S 1 2 3", "1 (ruled) S 1 2", "1 (ruled) S x 1 1 0 -1 0 0 0 0 0 1 1 0", "1 (ruled) S 1 1 1 0 -1 0 0 0 0 0 u 1 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
	// This process's own line parses, and its parent is who started it.
	own, err := readProcStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if own.ppid != os.Getppid() {
		t.Errorf("own ppid %d, want %d", own.ppid, os.Getppid())
	}
}

func TestParseProcStatus(t *testing.T) {
	status := "Name:\truled\nVmPeak:\t 1300000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	m, err := parseProcStatus(status)
	if err != nil || m.rssKB != 40960 || m.hwmKB != 51200 {
		t.Errorf("parseProcStatus = %+v, %v; want rss 40960, hwm 51200", m, err)
	}
	if _, err := parseProcStatus("Name:\truled\nVmRSS:\t 1 kB\n"); err == nil {
		t.Error("no VmHWM: no error")
	}
	if _, err := parseProcStatus("VmHWM:\t 1 kB\nVmRSS:\t 1 MB\n"); err == nil {
		t.Error("a unit other than kB: no error")
	}
	if _, err := parseProcStatus("VmHWM:\t 1 kB\nVmRSS:\t x kB\n"); err == nil {
		t.Error("not a number: no error")
	}
	if _, err := readProcStatus(os.Getpid()); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
}

func TestMetricSum(t *testing.T) {
	text := `# HELP ruled_plugin_pool_instances Instances.
# TYPE ruled_plugin_pool_instances gauge
ruled_plugin_pool_instances{plugin="fixedwindow",state="busy"} 3
ruled_plugin_pool_instances{plugin="fixedwindow",state="idle"} 5
ruled_plugin_pool_instances_total 100
go_memstats_heap_inuse_bytes 1.048576e+07
`
	if v, ok := metricSum(text, "ruled_plugin_pool_instances"); !ok || v != 8 {
		t.Errorf("instances = %v, %v; want 8 (not the _total metric)", v, ok)
	}
	if v, ok := metricSum(text, "go_memstats_heap_inuse_bytes"); !ok || v != 10485760 {
		t.Errorf("heap = %v, %v", v, ok)
	}
	if _, ok := metricSum(text, "go_goroutines"); ok {
		t.Error("an absent metric was found")
	}
}

// round is one drivers round at n requests in one second, with one latency
// of p99 (so that every percentile is p99) and CPU per request of ruled.
func round(n int64, p99 time.Duration, ruledUs int64) *driverRound {
	r := res(n)
	r.latencies = []time.Duration{p99}
	r.harnessCPU = time.Duration(n) * 20 * time.Microsecond
	return &driverRound{high: r, low: &result{decisions: 100, elapsed: time.Second, latencies: []time.Duration{p99 / 10}},
		daemonCPU: time.Duration(n*ruledUs) * time.Microsecond, rssKB: 40 << 10, instances: math.NaN(), heapMB: math.NaN()}
}

func TestSummarizeDriver(t *testing.T) {
	base := []*driverRound{round(1000, 4*time.Millisecond, 40), round(2000, 2*time.Millisecond, 40), round(1000, 4*time.Millisecond, 40)}
	rs := []*driverRound{round(900, 6*time.Millisecond, 50), round(1000, 8*time.Millisecond, 60), nil}
	rs[1].rssKB = 110 << 10
	w := summarizeDriver(drWasm, drNative, rs, base)
	if w.Rounds != 2 || w.Rate != 950 || w.RateMin != 900 || w.RateMax != 1000 {
		t.Errorf("rate %v (%v–%v) over %d rounds, want 950 (900–1000) over 2", w.Rate, w.RateMin, w.RateMax, w.Rounds)
	}
	// Per-round ratios 0.9 and 0.5 (the third round failed): median 0.7.
	if math.Abs(w.RateVsBase-0.7) > 1e-9 {
		t.Errorf("RateVsBase = %v, want 0.7", w.RateVsBase)
	}
	// p99 ratios 1.5 and 4: median 2.75.
	if w.P99VsBase != 2.75 {
		t.Errorf("P99VsBase = %v, want 2.75", w.P99VsBase)
	}
	if w.P99 != 6*time.Millisecond || w.LowP50 != 600*time.Microsecond {
		t.Errorf("p99 %v, low p50 %v; want the lower middle round's 6ms and 600µs", w.P99, w.LowP50)
	}
	if w.RuledUs != 55 || w.ClientUs != 20 || w.PluginUs != 0 || w.CallsPerReq != 0 {
		t.Errorf("ruled %v, client %v, plugin %v µs/req, calls %v", w.RuledUs, w.ClientUs, w.PluginUs, w.CallsPerReq)
	}
	if w.RSSMB != 110 || w.PeakMB != 110 {
		t.Errorf("RSS %v, peak %v MB; want the last round's 110 and the most, 110", w.RSSMB, w.PeakMB)
	}

	if n := summarizeDriver(drNative, "", base, nil); !math.IsNaN(n.RateVsBase) || !math.IsNaN(n.P99VsBase) || n.Rate != 1000 {
		t.Errorf("no base: %+v", n)
	}
	if n := summarizeDriver(drProcess, drNative, []*driverRound{nil}, base); n.Rounds != 0 || !math.IsNaN(n.Rate) {
		t.Errorf("no round ran: %+v", n)
	}
}

func TestDriverTargets(t *testing.T) {
	rows := []driverRow{
		{Name: drNative, Rounds: 3},
		{Name: drWasm, Base: drNative, Rounds: 3, RateVsBase: 0.85, P99VsBase: 2.5, RSSMB: 90, PeakMB: 120},
		{Name: drProcess, Base: drNative, Rounds: 3, RateVsBase: 0.3, P99VsBase: 1, RSSMB: math.NaN(), PeakMB: math.NaN(), LowP50: 400 * time.Microsecond},
		{Name: drGCRA, Base: drTokenbucket, Rounds: 0, RateVsBase: 1},
	}
	got := map[string]bool{}
	for _, tg := range driverTargets(rows) {
		got[tg.What] = tg.Holds
	}
	want := map[string]bool{
		"wasm-builtin throughput ≥ 0.8 × native":                  true,
		"wasm-builtin p99 ≤ 2 × native":                           false,
		"wasm-builtin daemon RSS ≤ 100 MB (VmRSS after the load)": true,
		"wasm-builtin daemon RSS ≤ 100 MB (peak)":                 false,
		"process throughput ≥ 0.4 × native":                       false,
		"process p50 < 0.5 ms at concurrency 1":                   true,
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v (none for a scenario that did not run)", got, want)
	}
	for k, v := range want {
		if h, ok := got[k]; !ok || h != v {
			t.Errorf("%s: holds %v (present %v), want %v", k, h, ok, v)
		}
	}
}

func TestParseSelectionDrivers(t *testing.T) {
	sel, err := parseSelection("native,wasm-gcra", driverNames)
	if err != nil || len(sel) != 2 || !sel[drNative] || !sel[drGCRA] {
		t.Errorf("two: %v, %v", sel, err)
	}
	if _, err := parseSelection("http", driverNames); err == nil || !strings.Contains(err.Error(), "http") {
		t.Errorf("an in-process scenario among the drivers: %v", err)
	}
}

func TestDriverScenarioRules(t *testing.T) {
	for _, sc := range driverScenarios("/x") {
		if !strings.Contains(sc.rules, "  - name: "+sc.name+"\n") || !strings.Contains(sc.rules, "subject: request.ip") {
			t.Errorf("%s: rules\n%s", sc.name, sc.rules)
		}
		if (sc.base == "") != strings.HasPrefix(sc.name, "native") {
			t.Errorf("%s: base %q; only the native scenarios have none", sc.name, sc.base)
		}
	}
}
