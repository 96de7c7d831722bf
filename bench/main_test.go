package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.80, 1.05, 0.93}, 0.93},
	} {
		in := slices.Clone(c.in)
		if got := median(in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		if !slices.Equal(in, c.in) {
			t.Errorf("median modified its argument: %v", in)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

// res is a round that made n decisions in one second.
func res(n int64) *result { return &result{decisions: n, elapsed: time.Second} }

func TestMedianRound(t *testing.T) {
	a, b, c, d := res(100), res(300), res(200), res(400)
	if got := medianRound([]*result{a, b, c}); got != c {
		t.Errorf("odd count: got rate %v, want 200", got.rate())
	}
	if got := medianRound([]*result{d, a, b, c}); got != c {
		t.Errorf("even count: got rate %v, want the lower middle 200", got.rate())
	}
	if got := medianRound([]*result{nil, b, nil}); got != b {
		t.Errorf("with failed rounds: got %v, want 300", got)
	}
	if got := medianRound([]*result{nil}); got != nil {
		t.Errorf("no round ran: got %v, want nil", got)
	}
}

func TestRoundRatios(t *testing.T) {
	num := []*result{res(80), res(105), nil, res(50)}
	den := []*result{res(100), res(100), res(100), nil}
	got := roundRatios(num, den)
	if want := []float64{0.80, 1.05}; !slices.Equal(got, want) {
		t.Errorf("roundRatios = %v, want %v", got, want)
	}
	if got := roundRatios(num, nil); len(got) != 0 {
		t.Errorf("no denominator: %v", got)
	}
}

func TestSummarize(t *testing.T) {
	ceiling := []*result{res(1000), res(2000), res(1000)}
	rs := []*result{res(800), res(1000), res(900)}
	for i, r := range rs {
		r.calls = r.decisions
		r.harnessCPU = time.Duration(r.decisions) * 10 * time.Microsecond
		r.redisCPU = time.Duration(r.decisions) * time.Duration(i+1) * time.Microsecond
		r.latencies = []time.Duration{time.Duration(r.decisions) * time.Microsecond}
	}
	rs[2].errors = 2
	w := summarize(rs, ceiling)
	if w.rounds != 3 || w.rate != 900 || w.rateMin != 800 || w.rateMax != 1000 {
		t.Errorf("rate %v (%v–%v) over %d rounds, want 900 (800–1000) over 3", w.rate, w.rateMin, w.rateMax, w.rounds)
	}
	// Per-round ratios 0.8, 0.5, 0.9: the median is 0.8, not 900/1333.
	if w.vsCeiling != 0.8 {
		t.Errorf("vsCeiling = %v, want 0.8", w.vsCeiling)
	}
	if w.p50 != 900*time.Microsecond {
		t.Errorf("p50 = %v, want the median round's 900µs", w.p50)
	}
	if w.callsPerDecision != 1 || w.harnessUs != 10 || w.redisUs != 2 || !math.IsNaN(w.wrkUs) || w.errors != 2 {
		t.Errorf("calls/dec %v, harness %v, redis %v, wrk %v µs/dec, errors %d; want 1, 10, 2, NaN, 2",
			w.callsPerDecision, w.harnessUs, w.redisUs, w.wrkUs, w.errors)
	}

	w = summarize([]*result{nil, res(500)}, nil)
	if w.rounds != 1 || w.rate != 500 || !math.IsNaN(w.vsCeiling) {
		t.Errorf("one round of two, no ceiling: %+v", w)
	}
	if w = summarize([]*result{nil}, ceiling); w.rounds != 0 || !math.IsNaN(w.rate) {
		t.Errorf("no round ran: %+v", w)
	}
}

func TestParseWrk(t *testing.T) {
	r, err := parseWrk("Running 3s test @ http://127.0.0.1:1/v1/check\nRESULT 24000 3001000 2500 9000 15000 3\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.decisions != 24000 || r.elapsed != 3001*time.Millisecond || r.errors != 3 ||
		r.fixed != [3]time.Duration{2500 * time.Microsecond, 9 * time.Millisecond, 15 * time.Millisecond} {
		t.Errorf("parseWrk = %+v", r)
	}
	if _, err := parseWrk("no result here"); err == nil {
		t.Error("no RESULT line: no error")
	}
	if _, err := parseWrk("RESULT 1 2 3 x 5 6"); err == nil {
		t.Error("bad number: no error")
	}
}

func TestParseRedisCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:9.000000\r\n"
	got, err := parseRedisCPU(info)
	if err != nil || got != 3750*time.Millisecond {
		t.Errorf("parseRedisCPU = %v, %v; want 3.75s", got, err)
	}
	if _, err := parseRedisCPU("# CPU\r\nused_cpu_sys:1.5\r\n"); err == nil {
		t.Error("no used_cpu_user: no error")
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_eval:calls=2,usec=1\r\ncmdstat_evalsha_ro:calls=100\r\ncmdstat_info:calls=7\r\n"
	if got := parseScriptCalls(info); got != 12 {
		t.Errorf("parseScriptCalls = %d, want 12", got)
	}
}

func TestParseOnly(t *testing.T) {
	all, err := parseOnly("")
	if err != nil || len(all) != len(scenarioNames) {
		t.Errorf("empty: %v, %v", all, err)
	}
	sel, err := parseOnly("http-floor, http-wrk")
	if err != nil || len(sel) != 2 || !sel[scHTTPFloor] || !sel[scHTTPWrk] {
		t.Errorf("two: %v, %v", sel, err)
	}
	if _, err := parseOnly("http,htp-wrk"); err == nil || !strings.Contains(err.Error(), "htp-wrk") {
		t.Errorf("unknown name: %v", err)
	}
}

func TestFloorAnswersTheCapturedAnswer(t *testing.T) {
	ruled := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Policy", `"bench";q=10;w=60`)
		w.Header().Set("RateLimit", `"bench";r=9;t=60`)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"allowed":true}`))
	})
	f, err := captureAnswer(ruled)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	f.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(`{"request":{}}`)))
	if rec.Code != http.StatusOK || rec.Body.String() != `{"allowed":true}` ||
		rec.Header().Get("RateLimit") != `"bench";r=9;t=60` || rec.Header().Get("RateLimit-Policy") != `"bench";q=10;w=60` ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("floor answered %d %v %q", rec.Code, rec.Header(), rec.Body)
	}

	noHeaders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("{}")) })
	if _, err := captureAnswer(noHeaders); err == nil {
		t.Error("an answer without RateLimit headers was captured")
	}
	denied := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTooManyRequests) })
	if _, err := captureAnswer(denied); err == nil {
		t.Error("a 429 was captured")
	}
}

func TestParseAB(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ruled")
	if err := os.WriteFile(bin, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	ts, err := parseAB("old=" + bin + ", new=" + bin)
	if err != nil || len(ts) != 2 || ts[0] != (abTarget{"old", bin}) || ts[1].label != "new" {
		t.Fatalf("parseAB: %v, %v", ts, err)
	}
	for in, want := range map[string]string{
		"old=" + bin:                         "at least two",
		"old=" + bin + ",old=" + bin:         `label "old" twice`,
		"old=" + bin + ",new":                "want LABEL=BINARY",
		"old=" + bin + ",new=/no/such/ruled": "new: stat /no/such/ruled",
	} {
		if _, err := parseAB(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAB(%q): %v, want an error with %q", in, err, want)
		}
	}
}
