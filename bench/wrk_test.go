package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

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

func TestParseStatus(t *testing.T) {
	ok, over, other, err := parseStatus("RESULT 30 1000 1 2 3 0\nSTATUS 15 14 1\n")
	if err != nil || ok != 15 || over != 14 || other != 1 {
		t.Errorf("parseStatus = %d, %d, %d, %v; want 15, 14, 1, nil", ok, over, other, err)
	}
	if _, _, _, err := parseStatus("RESULT 30 1000 1 2 3 0\n"); err == nil {
		t.Error("no STATUS line: no error")
	}
	if _, _, _, err := parseStatus("STATUS 1 x 0"); err == nil {
		t.Error("bad number: no error")
	}
}

// TestWrkScriptCyclesThroughTheSubjects drives a loopback server with
// bench/wrk.lua: with an argument the requests cycle through that many
// client IPs (the black-box pass's 1000), without one through more.
func TestWrkScriptCyclesThroughTheSubjects(t *testing.T) {
	w, err := findWrk(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w.threads = 1
	// distinct drives a server of its own with args and returns how many
	// client IPs the requests named, once every handler has returned.
	distinct := func(args []string) (int, *result) {
		var mu sync.Mutex
		ips := map[string]bool{}
		srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			var body struct {
				Request struct {
					IP string `json:"ip"`
				} `json:"request"`
			}
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Request.IP == "" {
				http.Error(rw, "no ip", http.StatusBadRequest)
				return
			}
			mu.Lock()
			ips[body.Request.IP] = true
			mu.Unlock()
		}))
		r, _, err := w.runScript(context.Background(), w.script, srv.URL, time.Second, 2, args...)
		srv.Close()
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return len(ips), r
	}
	for _, tc := range []struct {
		args []string
		want func(n int) bool
		say  string
	}{
		{[]string{"7"}, func(n int) bool { return n == 7 }, "exactly 7"},
		{nil, func(n int) bool { return n > 7 }, "more than 7"},
	} {
		n, r := distinct(tc.args)
		if r.errors != 0 || r.decisions < 20 {
			t.Fatalf("args %v: %d requests, %d errors", tc.args, r.decisions, r.errors)
		}
		if !tc.want(n) {
			t.Errorf("args %v: %d distinct client IPs in %d requests, want %s", tc.args, n, r.decisions, tc.say)
		}
	}
}
