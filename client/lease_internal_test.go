package client

import (
	"testing"
	"time"
)

// take reports, with its grant, whether the next lease should be asked for
// (under the lock it took), and what the lease has left is what its
// batches have left, expired batches aside.
func TestTakeReportsRunningLow(t *testing.T) {
	now := time.Now()
	ls := &lease{want: 10, results: []Result{{Rule: "r", Limit: 100}}, batches: []batch{
		{permits: 5, used: 5, deadline: now.Add(time.Second)},
		{permits: 3, deadline: now.Add(-time.Millisecond)}, // expired
		{permits: 6, deadline: now.Add(time.Second)},
	}}
	for i, wantLow := range []bool{false, true} {
		a, v, low := ls.take(1, now, false)
		if v != granted || low != wantLow || a.Results[0].Remaining != int64(5-i) {
			t.Fatalf("take %d: verdict %v low %v remaining %d; want granted, low %v, remaining %d", i, v, low, a.Results[0].Remaining, wantLow, 5-i)
		}
	}
	if n := ls.available(); n != 4 || len(ls.batches) != 1 {
		t.Fatalf("available %d in %d batches, want 4 in 1", n, len(ls.batches))
	}
	ls.filling = true // a fill under way: not low again
	if _, v, low := ls.take(1, now, false); v != granted || low {
		t.Fatalf("take with a fill under way: verdict %v low %v", v, low)
	}
}

// Returns go in calls of at most maxReturnsIn returns and maxHoldsIn
// holds, as ruled takes them.
func TestReturnChunk(t *testing.T) {
	rets := make([]leaseReturn, 1500)
	for i := range rets {
		rets[i].holds = 1
	}
	if n := returnChunk(rets); n != maxReturnsIn {
		t.Fatalf("1500 single-hold returns: %d in the first call, want %d", n, maxReturnsIn)
	}
	for i := range rets {
		rets[i].holds = 3
	}
	if n := returnChunk(rets); n != maxHoldsIn/3 {
		t.Fatalf("three-hold returns: %d in the first call, want %d", n, maxHoldsIn/3)
	}
	if n := returnChunk([]leaseReturn{{holds: 5000}, {holds: 1}}); n != 1 {
		t.Fatalf("a return of 5000 holds: %d in the first call, want 1 (alone)", n)
	}
}
