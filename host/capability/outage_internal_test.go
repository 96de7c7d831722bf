package capability

import (
	"errors"
	"testing"
	"time"
)

// TestOutageCountsOnlyLongFreshUnansweredRuns: calls that found Redis
// unavailable make the instance not ready only once they span more than
// the window with none answered since, and only while the latest is
// recent; an answered call ends the outage.
func TestOutageCountsOnlyLongFreshUnansweredRuns(t *testing.T) {
	const window = 200 * time.Millisecond
	var o outage
	if err := o.err(time.Now(), window); err != nil {
		t.Fatalf("no calls: %v", err)
	}
	start := time.Now()
	o.since.Store(start.UnixNano())
	o.last.Store(start.Add(window / 2).UnixNano())
	o.lastErr, o.node = errors.New("refused"), "127.0.0.1:1"
	if err := o.err(start.Add(window), window); err != nil {
		t.Fatalf("an outage shorter than the window: %v", err)
	}
	o.last.Store(start.Add(2 * window).UnixNano())
	if err := o.err(start.Add(2*window), window); err == nil {
		t.Fatal("an outage longer than the window: ready")
	}
	if err := o.err(start.Add(2*window+outageFresh+time.Millisecond), window); err != nil {
		t.Fatalf("an outage whose last call is stale: %v", err)
	}
	o.answered()
	if err := o.err(start.Add(2*window), window); err != nil {
		t.Fatalf("after an answered call: %v", err)
	}
	o.failed("127.0.0.1:1", errors.New("refused"))
	if err := o.err(time.Now(), window); err != nil {
		t.Fatalf("one failed call after an answered one: %v", err)
	}
}
