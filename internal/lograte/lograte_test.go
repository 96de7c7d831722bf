package lograte

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGateOneLinePerKeyPerInterval(t *testing.T) {
	const every = 10 * time.Second
	g := NewGate(every)
	t0 := time.Unix(1000, 0)
	if ok, n := g.Allow("a", t0); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := range 5 {
		if ok, _ := g.Allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("line %d within the interval let through", i)
		}
	}
	if ok, n := g.Allow("b", t0); !ok || n != 0 {
		t.Fatal("another key is held back")
	}
	if ok, n := g.Allow("a", t0.Add(every)); !ok || n != 5 {
		t.Fatalf("after the interval: %v, suppressed %d, want true, 5", ok, n)
	}
	if ok, _ := g.Allow("a", t0.Add(every+time.Second)); ok {
		t.Fatal("the next interval did not start")
	}
}

// A gate of n lines lets the first n lines of each key through in an
// interval, and the first line of the next interval reports the rest.
func TestGateNLinesPerKeyPerInterval(t *testing.T) {
	const every, n = time.Second, 100
	g := NewGateN(every, n)
	t0 := time.Unix(1000, 500_000_000) // intervals begin with a line, not on the second
	for i := range 150 {
		ok, s := g.Allow("p", t0.Add(time.Duration(i)*time.Millisecond))
		if ok != (i < n) || s != 0 {
			t.Fatalf("line %d: %v, suppressed %d; want %v, 0", i, ok, s, i < n)
		}
	}
	if ok, _ := g.Allow("q", t0.Add(200*time.Millisecond)); !ok {
		t.Fatal("another key shares the budget")
	}
	if ok, _ := g.Allow("p", t0.Add(every-time.Nanosecond)); ok {
		t.Fatal("a line past the budget, before the interval ended, let through")
	}
	if ok, s := g.Allow("p", t0.Add(every)); !ok || s != 51 {
		t.Fatalf("first line of the next interval: %v, suppressed %d; want true, 51", ok, s)
	}
	if ok, s := g.Allow("p", t0.Add(every+time.Millisecond)); !ok || s != 0 {
		t.Fatalf("second line of the next interval: %v, suppressed %d; want true, 0", ok, s)
	}
	g0 := NewGateN(every, 0)
	first, _ := g0.Allow("k", t0)
	second, _ := g0.Allow("k", t0)
	if !first || second {
		t.Fatal("a budget below one line is not one line")
	}
}

// Lines asked for at once from many goroutines: exactly the budget gets
// through in each interval, and the counts of the held-back ones add up.
func TestGateNConcurrent(t *testing.T) {
	const n, callers, each = 10, 8, 50
	g := NewGateN(time.Second, n)
	t0 := time.Unix(2000, 0)
	for round := range 3 {
		now := t0.Add(time.Duration(round) * time.Second)
		var passed, reported atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range each {
					if ok, s := g.Allow("k", now); ok {
						passed.Add(1)
						reported.Add(s)
					}
				}
			})
		}
		wg.Wait()
		if passed.Load() != n {
			t.Fatalf("round %d: %d lines passed, want %d", round, passed.Load(), n)
		}
		if want := int64(callers*each - n); round > 0 && reported.Load() != want {
			t.Fatalf("round %d: the interval's first line reported %d held back, want %d", round, reported.Load(), want)
		}
	}
}

// Keys past maxKeys share one slot: a client that picks keys cannot grow
// the gate, and its lines stay rate-limited.
func TestGateBoundsItsKeys(t *testing.T) {
	g := NewGate(time.Minute)
	t0 := time.Unix(1000, 0)
	passed := 0
	for i := range 3 * maxKeys {
		if ok, _ := g.Allow(fmt.Sprint("k", i), t0); ok {
			passed++
		}
	}
	if passed != maxKeys+1 {
		t.Errorf("%d of %d keys passed, want %d", passed, 3*maxKeys, maxKeys+1)
	}
	n := 0
	g.keys.Range(func(any, any) bool { n++; return true })
	if n != maxKeys+1 {
		t.Errorf("%d slots, want %d", n, maxKeys+1)
	}
}

// The handler passes one record per kind (level and message without the
// peer) each interval, the next carrying how many it dropped.
func TestHandlerDropsRepeatsOfAKind(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewTextHandler(&buf, nil), time.Hour))
	for i := range 500 {
		log.Warn(fmt.Sprintf("http: TLS handshake error from 127.0.0.1:%d: tls: client didn't provide a certificate", 40000+i))
	}
	log.Warn("http: panic serving 127.0.0.1:1: boom")
	log.Error("http: TLS handshake error from 127.0.0.1:2: EOF") // another level, another kind
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "dropped=0") {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	h := NewHandler(slog.NewTextHandler(&buf, nil), time.Hour)
	t0 := time.Unix(1000, 0)
	for i := range 4 {
		r := slog.NewRecord(t0.Add(time.Duration(i)*time.Hour/2), slog.LevelWarn, "x from y", 0)
		_ = h.Handle(context.Background(), r)
	}
	if !strings.Contains(buf.String(), "msg=\"x from y\" dropped=1") {
		t.Errorf("the line after an interval does not count the dropped one:\n%s", buf.String())
	}
}
