package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

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

	// CPU per request 50/40 and 60/40: median 1.375.
	if math.Abs(w.CPUVsBase-1.375) > 1e-9 {
		t.Errorf("CPUVsBase = %v, want 1.375", w.CPUVsBase)
	}
	if w.Box.Rounds != 0 || !math.IsNaN(w.Box.RateVsBase) {
		t.Errorf("no black-box pass ran, yet %+v", w.Box)
	}

	if n := summarizeDriver(drNative, "", base, nil); !math.IsNaN(n.RateVsBase) || !math.IsNaN(n.P99VsBase) || n.Rate != 1000 {
		t.Errorf("no base: %+v", n)
	}
	if n := summarizeDriver(drProcess, drNative, []*driverRound{nil}, base); n.Rounds != 0 || !math.IsNaN(n.Rate) {
		t.Errorf("no round ran: %+v", n)
	}
}

func TestDriverTargets(t *testing.T) {
	nan := math.NaN()
	rows := []driverRow{
		{Name: drNative, Rounds: 3},
		{Name: drWasm, Base: drNative, Rounds: 3, RateVsBase: 0.92, P99VsBase: 1.6, CPUVsBase: 1.1, RSSMB: 55, PeakMB: 70,
			Box: boxRow{Rounds: 3, RateVsBase: 0.85, P99VsBase: 1.2, CPUVsBase: 1.3, RSSMB: 58}},
		{Name: drProcess, Base: drNative, Rounds: 3, RateVsBase: 0.3, P99VsBase: 1, CPUVsBase: nan, RSSMB: nan, PeakMB: nan, LowP50: 400 * time.Microsecond},
		{Name: drGCRA, Base: drTokenbucket, Rounds: 3, RateVsBase: 0.85, P99VsBase: 2.5, CPUVsBase: nan, RSSMB: 90, PeakMB: 120},
		{Name: drTokenbucket, Rounds: 0, RateVsBase: 1},
	}
	got := map[string]bool{}
	for _, tg := range driverTargets(rows) {
		got[tg.What] = tg.Holds
	}
	want := map[string]bool{
		"wasm-builtin throughput ≥ 0.9 × native":                            true,
		"wasm-builtin p99 ≤ 1.5 × native":                                   false,
		"wasm-builtin CPU per request ≤ 1.15 × native":                      true,
		"wasm-builtin daemon RSS ≤ 60 MB (VmRSS after the load)":            true,
		"wasm-builtin daemon RSS ≤ 60 MB (peak)":                            false,
		"wasm-builtin black box: throughput ≥ 0.9 × native":                 false,
		"wasm-builtin black box: p99 ≤ 1.5 × native":                        true,
		"wasm-builtin black box: CPU per request ≤ 1.15 × native":           false,
		"wasm-builtin daemon RSS ≤ 60 MB (black box, VmRSS after the load)": true,
		"wasm-gcra throughput ≥ 0.8 × native-tokenbucket":                   true,
		"wasm-gcra p99 ≤ 2 × native-tokenbucket":                            false,
		"wasm-gcra daemon RSS ≤ 100 MB (VmRSS after the load)":              true,
		"wasm-gcra daemon RSS ≤ 100 MB (peak)":                              false,
		"process throughput ≥ 0.4 × native":                                 false,
		"process p50 < 0.5 ms at concurrency 1":                             true,
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

func TestSummarizeBox(t *testing.T) {
	box := func(n int64, p99 time.Duration, ruledUs int64) *driverRound {
		r := res(n)
		r.latencies = []time.Duration{p99}
		return &driverRound{box: r, boxCPU: time.Duration(n*ruledUs) * time.Microsecond, boxRSSKB: 50 << 10}
	}
	base := []*driverRound{box(1000, 4*time.Millisecond, 40), box(2000, 2*time.Millisecond, 40), nil}
	rs := []*driverRound{box(900, 6*time.Millisecond, 50), box(1000, 4*time.Millisecond, 44), box(1000, 4*time.Millisecond, 44)}
	b := summarizeBox(rs, base)
	if b.Rounds != 3 || b.Rate != 1000 || b.RateMin != 900 || b.RuledUs != 44 || b.RSSMB != 50 {
		t.Errorf("box %+v, want 3 rounds, 1000/s (900–1000), 44 µs, 50 MB", b)
	}
	// Ratios only where both ran: rate 0.9 and 0.5, p99 1.5 and 2, CPU 1.25 and 1.1.
	if math.Abs(b.RateVsBase-0.7) > 1e-9 || math.Abs(b.P99VsBase-1.75) > 1e-9 || math.Abs(b.CPUVsBase-1.175) > 1e-9 {
		t.Errorf("ratios rate %v p99 %v CPU %v, want 0.7, 1.75, 1.175", b.RateVsBase, b.P99VsBase, b.CPUVsBase)
	}
}
