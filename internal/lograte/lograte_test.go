package lograte

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
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
