package host_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// takeClientLease takes a lease of permits for req from e, all of them.
func takeClientLease(t *testing.T, e *host.Engine, req host.Request, permits int64) host.ClientLease {
	t.Helper()
	l, err := e.ClientLeases().Take(context.Background(), &host.LeaseRequest{Request: req, Permits: permits})
	if err != nil || l.Permits != permits || l.ID == "" {
		t.Fatalf("lease %+v (%v), want %d permits and an id", l, err, permits)
	}
	return l
}

// returnOf is a return of unused permits of l, taken for req. Its
// deadline is far (returnDeadline from now): these tests are about
// crediting a lease once, and a return that a loaded machine made come
// within 2 × host.ReturnSlack of the lease's own TTL (1 s) would be
// refused as late.
func returnOf(req host.Request, l host.ClientLease, unused int64) *host.LeaseReturn {
	return &host.LeaseReturn{Request: req, Permits: l.Permits, Unused: unused, Holds: l.Holds(), ID: l.ID,
		Deadline: time.Now().Add(returnDeadline)}
}

// returnDeadline is how far from when it is made returnOf puts a return's
// deadline.
const returnDeadline = time.Minute

// Property: however many returns of one lease race, on however many
// instances sharing the Redis, exactly one is credited, with its own
// unused units, and the others give nothing back (ErrLeaseReturned).
func TestClientLeaseReturnedConcurrentlyCreditsOnce(t *testing.T) {
	srv := redistest.Start(t)
	engines := []*host.Engine{newEngine(t, srv, clientLeaseRules, time.Second), newEngine(t, srv, clientLeaseRules, time.Second)}
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	t.Logf("seed %d", seed)
	const racers, rounds = 16, 20
	for round := range rounds {
		req := host.Request{IP: fmt.Sprintf("192.0.2.%d", 100+round)}
		l := takeClientLease(t, engines[0], req, 30)
		rets := make([]*host.LeaseReturn, racers)
		for i := range rets {
			rets[i] = returnOf(req, l, 1+rng.Int64N(30))
		}
		got := make([]host.LeaseReturnResult, racers)
		var start, done sync.WaitGroup
		start.Add(1)
		for i := range racers {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				n, err := returnLease(context.Background(), engines[i%len(engines)], rets[i])
				got[i] = host.LeaseReturnResult{Returned: n, Err: err}
			}()
		}
		start.Done()
		done.Wait()
		credited, winner := 0, -1
		for i, r := range got {
			switch {
			case r.Err == nil && r.Returned == rets[i].Unused:
				credited, winner = credited+1, i
			case errors.Is(r.Err, host.ErrLeaseReturned) && r.Returned == 0:
			default:
				t.Errorf("round %d: return %d of %d unused: %d, %v; want all of them or ErrLeaseReturned", round, i, rets[i].Unused, r.Returned, r.Err)
			}
		}
		if credited != 1 {
			t.Fatalf("round %d: %d of %d racing returns of one lease credited, want exactly 1", round, credited, racers)
		}
		if got, want := peekRemaining(t, engines[1], req, "per-ip"), 100-30+rets[winner].Unused; got != want {
			t.Fatalf("round %d: per-ip remaining %d, want %d: the lease's 30 less the %d of the one credited return", round, got, want, rets[winner].Unused)
		}
	}
}

// Partial returns never sum past what the lease took: after a return that
// gave units back, no other return of the lease does, in the same call or
// a later one. A return that gives nothing back (all used) marks nothing.
func TestClientLeaseReturnsSumToAtMostTheLease(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	ctx := context.Background()
	req := host.Request{IP: "192.0.2.20"}
	l := takeClientLease(t, e, req, 30)

	if n, err := returnLease(ctx, e, returnOf(req, l, 0)); err != nil || n != 0 {
		t.Fatalf("return of none unused: %d, %v; want 0 and no error", n, err)
	}
	called := time.Now()
	rets := []*host.LeaseReturn{returnOf(req, l, 3), returnOf(req, l, 30)}
	out := e.ClientLeases().Return(ctx, rets)
	if out[0].Err != nil || out[0].Returned != 3 || !errors.Is(out[1].Err, host.ErrLeaseReturned) || out[1].Returned != 0 {
		t.Fatalf("the lease twice in one call: %+v, want 3 back and then ErrLeaseReturned", out)
	}
	if n, err := returnLease(ctx, e, returnOf(req, l, 30)); !errors.Is(err, host.ErrLeaseReturned) || n != 0 {
		t.Fatalf("a later return: %d, %v; want 0 and ErrLeaseReturned", n, err)
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 100-30+3 {
		t.Fatalf("per-ip remaining %d, want %d: only the first return's 3 came back", got, 100-30+3)
	}

	// The mark expires a little past the lease's deadline, not before it:
	// LeaseReturnedTTL past the deadline of the return that set it
	// (rets[0]). Its TTL was set no sooner than the call and read no later
	// than now; Redis counts whole milliseconds (truncating the TTL set and
	// its clock at the set and the read: 2 ms at most).
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	if key := host.LeaseReturnedKey(e, l.ID); key != "ruled:_lease-returned:"+l.ID {
		t.Errorf("mark at %q, want ruled:_lease-returned:<id> as docs/http.md says", key)
	}
	ttl, err := c.PTTL(ctx, host.LeaseReturnedKey(e, l.ID)).Result()
	expires := rets[0].Deadline.Add(host.LeaseReturnedTTL)
	least, most := time.Until(expires)-2*time.Millisecond, expires.Sub(called)+2*time.Millisecond
	if err != nil || ttl < least || ttl > most {
		t.Fatalf("mark %s: TTL %v (%v), want within [%v, %v]: %v past the lease's deadline", host.LeaseReturnedKey(e, l.ID), ttl, err, least, most, host.LeaseReturnedTTL)
	}
}

// A return without a lease id is refused: it could not be credited once.
func TestClientLeaseReturnNeedsAnID(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, clientLeaseRules, time.Second)
	req := host.Request{IP: "192.0.2.21"}
	l := takeClientLease(t, e, req, 30)
	for _, id := range []string{"", "a:b", string(make([]byte, 65))} {
		ret := returnOf(req, l, 30)
		ret.ID = id
		if n, err := returnLease(context.Background(), e, ret); err == nil || n != 0 {
			t.Errorf("return with lease id %q: %d, %v; want refused", id, n, err)
		}
	}
	if got := peekRemaining(t, e, req, "per-ip"); got != 70 {
		t.Fatalf("per-ip remaining %d, want 70", got)
	}
}
