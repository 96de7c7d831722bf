package capability

import (
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

// BenchmarkRunningCalls is what tracking the calls in flight (for the
// watchdog to name a script Redis cannot kill) adds to every call.
func BenchmarkRunningCalls(b *testing.B) {
	var l runningCalls
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := running{plugin: "p", script: "s", start: time.Now()}
			l.add(&r)
			l.remove(&r)
		}
	})
}
