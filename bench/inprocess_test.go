package main

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

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
