package host_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// fakeClock is a clock a test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// newClockedEngine is newEngine with its clock at clk.
func newClockedEngine(t *testing.T, srv *redistest.Server, clk *fakeClock) *host.Engine {
	return newEngineOpts(t, srv, clientLeaseRules, capability.Options{Timeout: time.Second},
		func(o *host.Options) { o.Now = clk.now })
}

// Two instances on one Redis share one lease key without configuration:
// what one signs the other verifies, and a changed byte or a MAC made with
// another key is refused as forged.
func TestLeaseMACSharedByTheFleet(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	a := newEngine(t, srv, clientLeaseRules, time.Second)
	b := newEngine(t, srv, clientLeaseRules, time.Second)
	data := []byte(`{"p":10,"h":[{"Rule":"per-ip","Subject":"192.0.2.1","Taken":10}]}`)
	mac, err := a.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ClientLeases().Verify(ctx, data, mac); err != nil {
		t.Fatalf("another instance refuses the lease: %v", err)
	}
	key, err := srv.Client().Get(ctx, host.LeaseKeyName(a)).Bytes()
	if err != nil || len(key) != host.LeaseKeyBytes {
		t.Fatalf("lease key in Redis: %d bytes, %v; want %d", len(key), err, host.LeaseKeyBytes)
	}
	changed := []byte(`{"p":99,"h":[{"Rule":"per-ip","Subject":"192.0.2.1","Taken":99}]}`)
	if err := b.ClientLeases().Verify(ctx, changed, mac); !errors.Is(err, host.ErrLeaseForged) {
		t.Fatalf("changed lease: %v, want ErrLeaseForged", err)
	}
	other := newEngine(t, redistest.Start(t), clientLeaseRules, time.Second) // another fleet
	foreign, err := other.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ClientLeases().Verify(ctx, data, foreign); !errors.Is(err, host.ErrLeaseForged) {
		t.Fatalf("another fleet's lease: %v, want ErrLeaseForged", err)
	}
}

// Rotation: an operator deletes the key. The next instance to need one
// creates a new key; an instance that still has the old one reads the new
// one when a MAC fails to verify (at most once a second) and signs with it
// within the refresh time; leases signed with the old key are refused.
func TestLeaseKeyRotation(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clk := &fakeClock{t: time.Now()}
	a := newClockedEngine(t, srv, clk)
	data := []byte("lease contents")
	old, err := a.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Client().Del(ctx, host.LeaseKeyName(a)).Err(); err != nil {
		t.Fatal(err)
	}
	b := newClockedEngine(t, srv, clk) // starts after the rotation
	if err := b.ClientLeases().LoadKey(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := b.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ClientLeases().Verify(ctx, data, old); !errors.Is(err, host.ErrLeaseForged) {
		t.Fatalf("a lease of the old key: %v, want ErrLeaseForged", err)
	}
	// a read its key just now: a failed MAC does not read it again yet.
	if err := a.ClientLeases().Verify(ctx, data, fresh); !errors.Is(err, host.ErrLeaseForged) {
		t.Fatalf("within a second of its last read, a verified the new key's MAC (%v): it read Redis again", err)
	}
	clk.add(time.Second)
	if err := a.ClientLeases().Verify(ctx, data, fresh); err != nil {
		t.Fatalf("a second later, a does not pick up the new key: %v", err)
	}
	if err := a.ClientLeases().Verify(ctx, data, old); !errors.Is(err, host.ErrLeaseForged) {
		t.Fatalf("after picking up the new key, a still takes the old one's lease: %v", err)
	}
	// Replaced in place (SET): signing picks it up within the refresh.
	if err := srv.Client().Set(ctx, host.LeaseKeyName(a), "0123456789abcdef0123456789abcdef", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Second)
	third, err := a.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	clk.add(time.Second)
	if err := b.ClientLeases().Verify(ctx, data, third); err != nil {
		t.Fatalf("b refuses a's lease signed with the replaced key: %v", err)
	}
	// A key too short to be one is refused, not used.
	if err := srv.Client().Set(ctx, host.LeaseKeyName(a), "short", 0).Err(); err != nil {
		t.Fatal(err)
	}
	clk.add(10 * time.Second)
	if _, err := a.ClientLeases().Sign(ctx, data); err == nil {
		t.Fatal("signed with a 5-byte key")
	}
}

// leaseRecorder is an Observer that records client-lease units by rule.
type leaseRecorder struct {
	mu    sync.Mutex
	units map[string]int64 // "rule event"
}

func (r *leaseRecorder) Decision(string, string, host.Outcome, bool) {}
func (r *leaseRecorder) Check(time.Duration, bool)                   {}
func (r *leaseRecorder) Reload(error, int)                           {}
func (r *leaseRecorder) LeaseUnits(rule string, event host.LeaseEvent, units int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.units[rule+" "+string(event)] += units
}

// A late return naming a rule that is not loaded is told under
// host.LeaseRuleUnloaded, never under the name it gave: metric labels name
// only loaded rules.
func TestLateReturnOfUnloadedRuleIsNotALabel(t *testing.T) {
	srv := redistest.Start(t)
	rec := &leaseRecorder{units: map[string]int64{}}
	e := newEngineOpts(t, srv, clientLeaseRules, capability.Options{Timeout: time.Second},
		func(o *host.Options) { o.Observer = rec })
	ret := &host.LeaseReturn{Request: host.Request{IP: "192.0.2.1"}, Permits: 10, Unused: 10, Deadline: time.Now(), ID: host.NewLeaseID(),
		Holds: []host.LeaseHold{{Rule: "per-ip", Subject: "192.0.2.1", Taken: 10}, {Rule: "not-loaded-42", Subject: "x", Taken: 7}}}
	if _, err := returnLease(context.Background(), e, ret); !errors.Is(err, host.ErrLateReturn) {
		t.Fatalf("return: %v, want ErrLateReturn", err)
	}
	want := map[string]int64{"per-ip late": 10, host.LeaseRuleUnloaded + " late": 7}
	if len(rec.units) != len(want) || rec.units["per-ip late"] != 10 || rec.units[host.LeaseRuleUnloaded+" late"] != 7 {
		t.Fatalf("observed %v, want %v", rec.units, want)
	}
}

// While Redis does not answer, an instance signs and verifies with the key
// it last read, and tries Redis again at most once a second, so that
// callers do not queue behind one time-out after another.
func TestLeaseKeyOutlivesRedisFailures(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	clk := &fakeClock{t: time.Now()}
	a := newClockedEngine(t, srv, clk)
	data := []byte("lease contents")
	mac, err := a.ClientLeases().Sign(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	srv.Pause() // calls wait for their time-out, a second
	defer srv.Resume()
	clk.add(10 * time.Second) // the key is due for a read, which times out
	if again, err := a.ClientLeases().Sign(ctx, data); err != nil || !bytes.Equal(again, mac) {
		t.Fatalf("with Redis down: %v; signed with the cached key: %v", err, bytes.Equal(again, mac))
	}
	start := time.Now()
	for range 20 { // within the second after the failed read: no Redis call
		if err := a.ClientLeases().Verify(ctx, data, mac); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took >= time.Second { // one call to Redis would take that
		t.Errorf("20 verifications took %v: they tried Redis", took)
	}
}
