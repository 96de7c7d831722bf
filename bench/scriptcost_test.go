package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScriptCostSteps runs every step of -script-cost briefly against a
// private redis-server: each makes calls that Redis counts, and the
// fixedwindow steps grant, one call per decision or many, so their hashes
// hold the count (in their windows' fields).
func TestScriptCostSteps(t *testing.T) {
	ctx := context.Background()
	st, _, err := openRedis(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	client := st.Client()
	ap, err := autoPipeliner(client)
	if err != nil {
		t.Fatal(err)
	}
	defer ap.Close()
	for _, s := range costSteps() {
		before, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := measureCost(ctx, client, ap, s, 3, 4, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		after, err := client.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if r.calls == 0 || r.cpuUS <= 0 || r.cmdUS <= 0 {
			t.Errorf("%s: %+v, want calls that cost Redis time", s.name, r)
		}
		if s.name == "tokenbucket" {
			// Every call took a permit from a billion: each bucket is
			// stored, below full.
			for i := range 3 {
				l, err := client.HGet(ctx, "bench:tokenbucket:{"+strconv.Itoa(i)+"}:b", "l").Int64()
				if err != nil || l <= 0 || l >= 1e9*1e6 {
					t.Errorf("tokenbucket, subject %d: level %d (%v), want one below full", i, l, err)
				}
			}
		}
		if s.name != "fixedwindow" && s.name != "capped" && s.name != "batched" {
			continue
		}
		var counted int64
		for i := range 3 {
			// Every window's field ("<start>:<end>").
			fields, err := client.HGetAll(ctx, "bench:"+s.name+":{"+strconv.Itoa(i)+"}:c").Result()
			if err != nil {
				t.Fatalf("subject %d: %v", i, err)
			}
			for f, v := range fields {
				if strings.Contains(f, ":") {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						t.Fatalf("subject %d, window %s: %v", i, f, err)
					}
					counted += n
				}
			}
		}
		// A decision in a new window drops the old window's field
		// (fixedwindow keeps one window a hash): only a run within one
		// minute of Redis time keeps every grant.
		crossed := before.Truncate(time.Minute) != after.Truncate(time.Minute)
		if counted > r.calls || counted == 0 || (!crossed && counted != r.calls) {
			t.Errorf("%s counted %d grants for %d decisions (a minute turned during the run: %v)", s.name, counted, r.calls, crossed)
		}
	}
}
