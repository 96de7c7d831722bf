package host

import (
	"testing"
	"time"
)

func TestLogGateOneLinePerKeyPerInterval(t *testing.T) {
	var g logGate
	t0 := time.Unix(1000, 0)
	if ok, n := g.allow("a", t0); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := range 5 {
		if ok, _ := g.allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatalf("line %d within the interval let through", i)
		}
	}
	if ok, n := g.allow("b", t0); !ok || n != 0 {
		t.Fatal("another key is held back")
	}
	if ok, n := g.allow("a", t0.Add(degradedLogEvery)); !ok || n != 5 {
		t.Fatalf("after the interval: %v, suppressed %d, want true, 5", ok, n)
	}
	if ok, _ := g.allow("a", t0.Add(degradedLogEvery+time.Second)); ok {
		t.Fatal("the next interval did not start")
	}
}
