package host_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

const leasedRule = `rules:
  - name: leased
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000, window: 1h}
    lease: 50
`

func TestLeasesNeverOverAdmitAndSpareRedis(t *testing.T) {
	srv := redistest.Start(t)
	engines := []*host.Engine{newEngine(t, srv, leasedRule, time.Second), newEngine(t, srv, leasedRule, time.Second)}
	for _, e := range engines {
		if err := e.Preload(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	before := evalCalls(t, srv)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(e *host.Engine) {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if res := check(e, "192.0.2.200"); res.Allowed {
					allowed.Add(1)
				}
			}
		}(engines[g%2])
	}
	wg.Wait()
	calls := evalCalls(t, srv) - before
	// 1,600 requests for a quota of 1,000: never more than the quota, and
	// at most one lease per instance left stranded.
	if a := allowed.Load(); a > 1000 || a < 1000-2*50 {
		t.Fatalf("admitted %d, want between 900 and 1000", a)
	}
	if calls > 1000/50+40 {
		t.Fatalf("%d script calls for %d admissions with leases of 50", calls, allowed.Load())
	}
	t.Logf("admitted %d with %d script calls", allowed.Load(), calls)
}

func TestReturnLeasesGivesUnusedPermitsBack(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, leasedRule, time.Second)
	for i := 0; i < 7; i++ {
		if !check(e, "198.51.100.3").Allowed {
			t.Fatal("denied")
		}
	}
	host.ReturnRuleLeases(context.Background(), e)
	peek := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "198.51.100.3"}, Hits: 0})
	if r := peek.Results[0]; r.Remaining != 993 {
		t.Fatalf("remaining %d after 7 admissions and returning the lease, want 993", r.Remaining)
	}
}

// BenchmarkCheckLeased is decisions served in-process from leases.
func BenchmarkCheckLeased(b *testing.B) {
	srv := redistest.Start(b)
	e := newEngineTB(b, srv, `rules:
  - name: leased
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000000000, window: 1h}
    lease: 100000
`)
	ips := make([]string, 64)
	for i := range ips {
		ips[i] = fmt.Sprintf("10.1.0.%d", i)
	}
	runChecks(b, e, ips, true)
}

// An instance's idle lease goes back to Redis within a sweep of going
// idle, so that other instances find its quota.
func TestIdleLeasesGoBack(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, leasedRule, time.Second)
	other := newEngine(t, srv, leasedRule, time.Second)
	peek := func(ip string) int64 {
		res := other.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ip}, Hits: 0})
		return res.Results[0].Remaining
	}
	// The sweeper (Engine.Run) starts after the first peek, so that the
	// peek sees the lease held however slow the machine is. The lease must
	// then have time left to go idle and back before it ends, MaxLeaseAge
	// after it was taken (past that its permits stay counted): a try that
	// a loaded machine made use up half of it is redone on a fresh subject.
	var ip string
	var taken, idle time.Time
	for try := 0; ; try++ {
		ip, taken = fmt.Sprintf("198.51.100.%d", 4+try), time.Now()
		for i := 0; i < 7; i++ {
			if !check(e, ip).Allowed {
				t.Fatal("denied")
			}
		}
		idle = time.Now()
		if got := peek(ip); got != 950 {
			t.Fatalf("remaining %d seen from another instance right after a lease of 50, want 950", got)
		}
		if time.Since(taken) < host.MaxLeaseAge/2 {
			break
		}
		if try == 2 {
			t.Fatalf("3 tries took %v or more to take a lease and peek: no time left for the sweeper", host.MaxLeaseAge/2)
		}
		t.Logf("try %d took %v to take a lease and peek; again", try+1, time.Since(taken))
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, "idle-leases", time.Hour) }()
	t.Cleanup(func() { cancel(); <-done })
	ends := taken.Add(host.MaxLeaseAge)
	for {
		ended := time.Now().After(ends) // before the peek: what went back by then shows in it
		got := peek(ip)
		if got == 993 {
			break
		}
		if ended {
			t.Fatalf("remaining %d once the lease ended, %v after it went idle, want 993: its permits did not go back", got, time.Since(idle))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("returned %v after going idle", time.Since(idle))
}

// TestBusyLeaseLosesNothingToTheSweeper: a subject used steadily while
// returnIdleRuleLeases (Engine.Run) keeps every leased unit: what Redis counts after
// the leases go back is exactly what was admitted, across several lease
// ages (MaxLeaseAge), and refills are few.
func TestBusyLeaseLosesNothingToTheSweeper(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, `rules:
  - name: leased
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
    lease: 50
`, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, "idle-leases", time.Hour) }()
	before := evalCalls(t, srv)
	admitted := 0
	start := time.Now()
	for ; time.Since(start) < 2500*time.Millisecond; time.Sleep(2 * time.Millisecond) {
		if check(e, "198.51.100.9").Allowed {
			admitted++
		}
	}
	took := time.Since(start)
	calls := evalCalls(t, srv) - before
	cancel()
	<-done // the sweeper has given back what it took out
	host.ReturnRuleLeases(context.Background(), e)
	peek := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "198.51.100.9"}, Hits: 0})
	if got, want := peek.Results[0].Remaining, int64(1000000-admitted); got != want {
		t.Fatalf("remaining %d after %d admissions, want %d: %d units lost", got, admitted, want, want-got)
	}
	// One refill per 50 admissions and one per lease age, give or take
	// (3 calls an age: the loop lasts 2.5 s and more on a loaded machine).
	ages := int(took/host.MaxLeaseAge) + 1
	if limit := int64(admitted/50 + 3*ages + 5); calls > limit {
		t.Fatalf("%d script calls for %d admissions, want at most %d", calls, admitted, limit)
	}
	t.Logf("%d admitted with %d script calls", admitted, calls)
}
