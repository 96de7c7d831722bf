package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
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

// TestRawCommandsWriteWhatTheEngineWrites: the raw scenarios' command line
// for a subject writes the keys, fields and values that the engine's
// decision for that subject writes, so that the ceiling is the engine's
// own Redis work.
func TestRawCommandsWriteWhatTheEngineWrites(t *testing.T) {
	rs := redistest.Start(t)
	client := rs.Client()
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	rulesPath := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesPath, []byte(rulesYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := newEngine(ctx, client, log, rulesPath, false)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	const ip = "10.0.1.2"
	raw, err := rawCommands(ctx, client, log, rulesPath, []string{ip})
	if err != nil {
		t.Fatal(err)
	}
	// The window is an hour: a second attempt follows one whose two calls
	// fell in two windows, and cannot cross the hour again.
	var viaEngine, viaRaw map[string]map[string]string
	for range 2 {
		if err := client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: ip}, Hits: 1}); !res.Allowed || len(res.Results) != 1 || res.Results[0].Degraded != "" {
			t.Fatalf("engine: %+v", res)
		}
		viaEngine = redisContents(t, client)
		if len(viaEngine) == 0 {
			t.Fatal("the engine's decision wrote no key")
		}
		if err := client.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := client.Do(ctx, raw[0]...).Err(); err != nil {
			t.Fatal(err)
		}
		if viaRaw = redisContents(t, client); maps.EqualFunc(viaRaw, viaEngine, maps.Equal) {
			return
		}
	}
	t.Fatalf("the raw command wrote\n%v\nthe engine's decision\n%v", viaRaw, viaEngine)
}

// redisContents is every key in Redis, each a hash, with its fields; a key
// without an expiry gets the field "(no TTL)".
func redisContents(t *testing.T, c *redis.Client) map[string]map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, k := range keys {
		h, err := c.HGetAll(ctx, k).Result()
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if ttl, err := c.PTTL(ctx, k).Result(); err != nil || ttl <= 0 {
			h["(no TTL)"] = fmt.Sprint(ttl, err)
		}
		out[k] = h
	}
	return out
}
