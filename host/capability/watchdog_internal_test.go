package capability

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// The back-off doubles from the first quarantine up to MaxQuarantine, and
// starts again from the first after quarantineForget without an offence.
func TestQuarantineBackOff(t *testing.T) {
	var q quarantine
	now := time.Unix(1_000_000, 0)
	var got []time.Duration
	for range 8 {
		d, _ := q.strike(now, DefaultQuarantine, "test")
		got = append(got, d)
		if q.refuses(now.Add(d-time.Millisecond)) == "" || q.refuses(now.Add(d)) != "" {
			t.Fatalf("quarantined for %v: refuses at the wrong times", d)
		}
		now = now.Add(d + time.Minute)
	}
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 320 * time.Second, MaxQuarantine, MaxQuarantine}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("back-offs %v, want %v", got, want)
		}
	}
	if d, strikes := q.strike(now.Add(quarantineForget+time.Second), DefaultQuarantine, "test"); d != DefaultQuarantine || strikes != 1 {
		t.Fatalf("after an hour without offence: %v (strike %d), want %v (strike 1)", d, strikes, DefaultQuarantine)
	}
}

// A call whose caller gave up stays a suspect, older calls first, until
// its node answers a command sent after it gave up; only the newest
// maxGaveUp are kept.
func TestRunningCallsRememberCallersThatGaveUp(t *testing.T) {
	var l runningCalls
	t0 := time.Now()
	a := running{plugin: "a", node: "n1", start: t0}
	b := running{plugin: "b", node: "n1", start: t0.Add(time.Millisecond)}
	other := running{plugin: "o", node: "n2", start: t0.Add(-time.Millisecond)}
	l.add(&other)
	l.add(&a)
	l.add(&b)
	l.end(&a, true)
	after := t0.Add(time.Hour)
	if r, ok := l.oldest("n1", after); !ok || r.plugin != "a" {
		t.Fatalf("oldest = %+v, %v; want a, whose caller gave up", r, ok)
	}
	if r, ok := l.oldest("n2", after); !ok || r.plugin != "o" {
		t.Fatalf("oldest on n2 = %+v, %v; want o, the only call to it", r, ok)
	}
	if _, ok := l.oldest("n1", t0); ok {
		t.Fatal("a call that started at the bound counted as before it")
	}
	l.answered("n2", after) // another node answered
	if r, _ := l.oldest("n1", after); r.plugin != "a" {
		t.Fatalf("another node's answer cleared a: oldest = %+v", r)
	}
	l.answered("n1", t0) // sent before a gave up
	if r, _ := l.oldest("n1", after); r.plugin != "a" {
		t.Fatalf("an answer to a command sent before a gave up cleared it: oldest = %+v", r)
	}
	l.answered("n1", after)
	if r, ok := l.oldest("n1", after); !ok || r.plugin != "b" {
		t.Fatalf("after its node answered: oldest = %+v, %v; want b, still in flight", r, ok)
	}
	l.end(&b, false)
	if r, ok := l.oldest("n1", after); ok {
		t.Fatalf("a call answered in time is a suspect: %+v", r)
	}
	for i := range maxGaveUp + 10 {
		r := running{plugin: "p", node: "n1", start: t0.Add(time.Duration(i) * time.Millisecond)}
		l.add(&r)
		l.end(&r, true)
	}
	r, _ := l.oldest("n1", after)
	if len(l.gaveUp) != maxGaveUp || !r.start.Equal(t0.Add(10*time.Millisecond)) {
		t.Fatalf("%d remembered, oldest from %v; want %d, the newest", len(l.gaveUp), r.start.Sub(t0), maxGaveUp)
	}
}

// The calls in flight are spread over several lists, and the oldest call
// to a node is found whichever list holds it, while calls come and go.
func TestRunningCallsOldestAcrossLists(t *testing.T) {
	var l runningCalls
	t0 := time.Now()
	calls := make([]running, 200)
	used := map[*runningList]bool{}
	for i := range calls {
		// newest first, so that list order and start order disagree
		calls[i] = running{plugin: fmt.Sprint(i), node: "n1", start: t0.Add(time.Duration(len(calls)-i) * time.Microsecond)}
		l.add(&calls[i])
		used[calls[i].list] = true
	}
	if len(used) < runningLists/2 {
		t.Fatalf("200 calls a microsecond apart went on %d of %d lists", len(used), runningLists)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 { // other calls come and go meanwhile
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := running{plugin: "other", node: "n1", start: time.Now().Add(time.Hour)}
				l.add(&r)
				l.end(&r, false)
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	after := t0.Add(time.Hour)
	for i := len(calls) - 1; i >= 0; i-- {
		r, ok := l.oldest("n1", after)
		if !ok || r.plugin != calls[i].plugin {
			t.Fatalf("oldest = %+v, %v; want call %d", r, ok, i)
		}
		l.end(&calls[i], false)
	}
	if r, ok := l.oldest("n1", after); ok {
		t.Fatalf("no call left, yet oldest = %+v", r)
	}
}

// BenchmarkRunningCalls is what tracking the calls in flight (for the
// watchdog to name a script Redis cannot kill) adds to every call.
func BenchmarkRunningCalls(b *testing.B) {
	var l runningCalls
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := running{plugin: "p", script: "s", start: time.Now()}
			l.add(&r)
			l.end(&r, false)
		}
	})
}
