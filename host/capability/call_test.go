package capability

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

func TestDeadlinesShared(t *testing.T) {
	const timeout = 80 * time.Millisecond
	d := newDeadlines(timeout)
	if d.tick != timeout/16 {
		t.Fatalf("tick %v, want %v", d.tick, timeout/16)
	}
	now := time.Now()
	first := d.at(now)
	if got := first.at.Sub(now); got != timeout {
		t.Fatalf("first deadline %v after its call, want %v", got, timeout)
	}
	later := now.Add(d.tick - 1)
	if d.at(later) != first {
		t.Fatal("a call within the tick got its own deadline")
	}
	if got := first.at.Sub(later); got > timeout || got < timeout-d.tick {
		t.Fatalf("shared deadline %v after a later call, want within (%v, %v]", got, timeout-d.tick, timeout)
	}
	next := d.at(now.Add(d.tick))
	if next == first || next.at.Sub(now.Add(d.tick)) != timeout {
		t.Fatalf("a call after the tick shares the old deadline or got %v", next.at.Sub(now.Add(d.tick)))
	}
	// While another call replaces the deadline, a call up to a tick past
	// the window takes the old one; one later waits for the new one.
	d.mu.Lock()
	locked := true
	defer func() {
		if locked {
			d.mu.Unlock()
		}
	}()
	late := now.Add(3*d.tick - 1) // next's window ended at now+2·tick
	tookOld := make(chan *deadline, 1)
	go func() { tookOld <- d.at(late) }()
	select {
	case got := <-tookOld:
		if got != next || got.at.Sub(late) < timeout-2*d.tick {
			t.Fatalf("during a replacement a call a tick late got %v after it, want the current deadline", got.at.Sub(late))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a call a tick late waited for the replacement")
	}
	waited := make(chan *deadline, 1)
	go func() { waited <- d.at(now.Add(3 * d.tick)) }()
	select {
	case <-waited:
		t.Fatal("a call two ticks late did not wait for the replacement")
	case <-time.After(50 * time.Millisecond):
	}
	d.mu.Unlock()
	locked = false
	if got := <-waited; got == next || got.at.Sub(now.Add(3*d.tick)) != timeout {
		t.Fatalf("after the replacement a late call got %v", got.at.Sub(now.Add(3*d.tick)))
	}
	if newDeadlines(time.Hour).tick != maxDeadlineTick {
		t.Fatalf("tick not capped at %v", maxDeadlineTick)
	}
}

func TestBound(t *testing.T) {
	c := New(nil, Options{Timeout: 40 * time.Millisecond})
	type key struct{}

	// An uncancellable parent (the engine's usual context.Background) and
	// a cancellable one (an RPC's) alike: the call shares the time-out
	// context, keeps the parent's values, and outlives the parent's
	// cancellation (call names it as the cause afterwards).
	for _, cancellable := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancellable parent %v", cancellable), func(t *testing.T) {
			parent, stop := context.WithValue(context.Background(), key{}, "v"), context.CancelFunc(func() {})
			if cancellable {
				parent, stop = context.WithCancel(parent)
			}
			start := time.Now()
			var cb callBuf
			ctx, cancel, callers := c.bound(parent, start, time.Time{}, &cb)
			defer cancel()
			if ctx != context.Context(&cb.ctx) || callers {
				t.Fatalf("bound context %T, want the call's own", ctx)
			}
			if ctx.Value(key{}) != "v" {
				t.Fatal("parent's value lost")
			}
			if dl, ok := ctx.Deadline(); !ok || dl.After(start.Add(c.timeout)) {
				t.Fatalf("deadline %v (%v), want at most %v", dl, ok, start.Add(c.timeout))
			}
			stop()
			if ctx.Err() != nil {
				t.Fatal("the shared context ended with the parent")
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("not done after the time-out")
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("err %v, want deadline exceeded", ctx.Err())
			}
		})
	}
	t.Run("looser parent deadline", func(t *testing.T) {
		parent, stop := context.WithTimeout(context.Background(), time.Hour)
		defer stop()
		var cb callBuf
		ctx, cancel, callers := c.bound(parent, time.Now(), time.Time{}, &cb)
		defer cancel()
		if ctx != context.Context(&cb.ctx) || callers {
			t.Fatalf("bound context %T, want the call's own", ctx)
		}
	})
	t.Run("tighter decision deadline", func(t *testing.T) {
		now := time.Now()
		var cb callBuf
		for _, later := range []time.Duration{c.timeout, time.Hour} { // not tighter: the shared time-out
			ctx, cancel, callers := c.bound(context.Background(), now, now.Add(later), &cb)
			cancel()
			if ctx != context.Context(&cb.ctx) || callers {
				t.Fatalf("a decision deadline %v away was used as the bound", later)
			}
		}
		deadline := now.Add(c.timeout / 2)
		ctx, cancel, callers := c.bound(context.Background(), now, deadline, &cb)
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(deadline) || !callers {
			t.Fatalf("deadline %v (%v, callers %v), want the decision's %v", dl, ok, callers, deadline)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("not done at the decision deadline")
		}
	})
	t.Run("tighter parent deadline", func(t *testing.T) {
		parent, stop := context.WithTimeout(context.Background(), time.Millisecond)
		defer stop()
		var cb callBuf
		ctx, cancel, callers := c.bound(parent, time.Now(), time.Time{}, &cb)
		defer cancel()
		if ctx != parent || !callers {
			t.Fatal("the parent's earlier deadline was not used as it is")
		}
	})
}

func TestFullKeysMatchKeyPrefix(t *testing.T) {
	p, err := New(nil, Options{}).Register("p", []sdk.Script{{Name: "s", Source: "return 1"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"10.0.0.1", "", "user {42} with spaces", "#x"} {
		keys := []string{"c", "d", "e", "f", "g"}
		got := p.fullKeys("rule", EscapeSubject(subject), keys, nil)
		for i, k := range keys {
			if want := p.KeyPrefix("rule", subject) + k; got[i] != want {
				t.Errorf("subject %q key %q: %q, want %q", subject, k, got[i], want)
			}
		}
	}
}
