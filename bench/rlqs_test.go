package main

import (
	"context"
	"testing"
	"time"
)

// TestRLQSLoad runs the rlqs mode's loads once, briefly, with two clients:
// every client decides, reports and is assigned quota, every tenant admits,
// and no more than its limit between the clients.
func TestRLQSLoad(t *testing.T) {
	bin := ruledBinary(t)
	st, url, err := openRedis(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, load := range []rlqsLoad{{"ample", 1_000_000_000}, {"scarce", 50}} {
		r, err := rlqsOnce(context.Background(), bin, t.TempDir(), url, load, 2, 3*time.Second, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.perClient) != 2 || r.perClient[0] == 0 || r.perClient[1] == 0 || r.reports == 0 || r.assign == 0 {
			t.Fatalf("%s: %+v", load.name, r)
		}
		for k, n := range r.admitted {
			if n > load.limit || n == 0 {
				t.Fatalf("%s: tenant %d admitted %d, limit %d", load.name, k, n, load.limit)
			}
		}
	}
}
