package capability

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlines shares time-out contexts between script calls. The calls that
// start within one tick of the first share its context, whose deadline is
// that first call's start plus the time-out: a call is given between
// timeout-tick and timeout (timeout-2·tick while the context is being
// replaced; see at), never more, and costs no timer of its own (a
// context.WithTimeout per call allocated a context, a timer and a channel
// and took the timer lock twice, at about 30,000 calls a second).
type deadlines struct {
	timeout, tick time.Duration

	mu  sync.Mutex // serialises replacing cur
	cur atomic.Pointer[deadline]
}

// deadline is one shared time-out context.
type deadline struct {
	ctx context.Context
	// cancel is never called: calls that started in the tick may still wait
	// on ctx. The context releases its timer itself when it expires.
	cancel context.CancelFunc
	at     time.Time // ctx's deadline
	until  time.Time // calls that start before this share ctx
}

// maxDeadlineTick bounds how much earlier than its start plus the time-out
// a call's shared deadline may fall.
const maxDeadlineTick = 10 * time.Millisecond

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, tick: max(min(timeout/16, maxDeadlineTick), 1)}
}

// at returns the shared deadline for a call that starts at now. A call
// that finds another replacing the deadline takes the one being replaced
// while it is less than a tick past its window, rather than wait: with
// more goroutines than cores the one replacing it may be descheduled while
// it holds the lock, and every call behind it would wait with it (the
// mutex profile at GOMAXPROCS=8 put 70 % of the decision path's lock
// waits here). Such a call is given between timeout-2·tick and timeout.
func (d *deadlines) at(now time.Time) *deadline {
	cur := d.cur.Load()
	if cur != nil && now.Before(cur.until) {
		return cur
	}
	if !d.mu.TryLock() {
		if cur != nil && now.Before(cur.until.Add(d.tick)) {
			return cur
		}
		d.mu.Lock()
	}
	defer d.mu.Unlock()
	if cur := d.cur.Load(); cur != nil && now.Before(cur.until) {
		return cur
	}
	dl := &deadline{at: now.Add(d.timeout), until: now.Add(d.tick)}
	dl.ctx, dl.cancel = context.WithDeadline(context.Background(), dl.at)
	// A context makes its Done channel under its lock on the first call:
	// make it now, before the calls of the tick share the context, so
	// that none of them waits on that lock (at GOMAXPROCS=8 it held a
	// third of the decision path's mutex wait).
	dl.ctx.Done()
	d.cur.Store(dl)
	return dl
}

// callCtx is a call's context when the capability's time-out is its
// tightest bound: the parent's values, the shared deadline's Deadline, Done
// and Err.
type callCtx struct {
	context.Context // the parent, for Value
	dl              *deadline
}

func (c *callCtx) Deadline() (time.Time, bool) { return c.dl.at, true }
func (c *callCtx) Done() <-chan struct{}       { return c.dl.ctx.Done() }
func (c *callCtx) Err() error                  { return c.dl.ctx.Err() }

// callArgs is the number of command-line arguments a call holds without a
// second allocation: EVALSHA, the hash, the key count, the keys, the clock
// and the plugin's arguments.
const callArgs = 12

// callKeys is the number of keys a call holds without a second allocation.
const callKeys = 4

// callBuf is one call's context, keys and command line in one allocation.
type callBuf struct {
	ctx     callCtx
	keys    [callKeys]string
	args    [callArgs]any
	running running // in the capability's list while the call runs
}

// bound returns ctx bounded by the capability's time-out for a call that
// starts at now, and by deadline when that comes first (unless zero), and
// the function to call when the call is done. Where ctx's own deadline
// comes first, it is ctx itself; where deadline does, a
// context.WithDeadline of ctx; otherwise (the time-out comes first, the
// usual case) cb.ctx over a shared deadline: no allocation, no timer. That
// context does not end when ctx is cancelled: a call, once sent, is waited
// for until Redis answers or the time-out, and call names a hang-up as the
// cause of its error afterwards (a context.WithDeadline of a cancellable
// ctx, such as an RPC's, cost a timer and its lock twice per call).
// callers is true when the bound is the caller's (ctx's or deadline), not
// the capability's time-out.
func (c *Capability) bound(ctx context.Context, now, deadline time.Time, cb *callBuf) (_ context.Context, _ context.CancelFunc, callers bool) {
	limit := now.Add(c.timeout)
	if !deadline.IsZero() && deadline.Before(limit) {
		limit, callers = deadline, true
	}
	if parent, has := ctx.Deadline(); has && !parent.After(limit) {
		return ctx, nop, true // the caller's deadline is the tighter bound
	}
	if callers {
		ctx, cancel := context.WithDeadline(ctx, limit)
		return ctx, cancel, true
	}
	cb.ctx = callCtx{Context: ctx, dl: c.deadlines.at(now)}
	return &cb.ctx, nop, false
}

func nop() {}
