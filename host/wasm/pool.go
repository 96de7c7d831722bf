package wasm

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned by calls on a closed plugin.
var ErrClosed = errors.New("wasm: plugin closed")

// pool holds a plugin's instances. At most size exist at once; each is
// either idle (in the idle channel) or used by exactly one goroutine.
//
// slots holds one token per live instance (or one being created), so that
// a goroutine that finds no idle instance either creates one or waits for
// one to come back.
type pool struct {
	p     *Plugin
	size  int
	trims bool // it may hold more than Options.Prewarm instances: trim them
	idle  chan *instance
	slots chan struct{}

	mu       sync.Mutex // orders put and close
	closed   atomic.Bool
	refills  sync.WaitGroup
	closedCh chan struct{}

	// lowIdle is the fewest idle instances a call has left behind since
	// the last trim (math.MaxInt64 when no call took one): instances
	// beyond it were not needed in that period.
	lowIdle atomic.Int64
	trimmed atomic.Uint64 // instances closed as not needed
}

func newPool(p *Plugin, size int) *pool {
	pl := &pool{p: p, size: size, trims: size > p.opts.Prewarm, idle: make(chan *instance, size), slots: make(chan struct{}, size),
		closedCh: make(chan struct{})}
	pl.lowIdle.Store(math.MaxInt64)
	return pl
}

// took records that a call took an idle instance.
func (pl *pool) took() {
	if !pl.trims {
		return
	}
	n := int64(len(pl.idle))
	for low := pl.lowIdle.Load(); n < low && !pl.lowIdle.CompareAndSwap(low, n); {
		low = pl.lowIdle.Load()
	}
}

// trimEvery closes, every period, the instances beyond Options.Prewarm
// that stayed idle through the whole period, until the pool is closed: the
// pool grows with demand (up to its size) and shrinks back when demand
// goes.
func (pl *pool) trimEvery(period time.Duration) {
	if !pl.trims {
		return // never more than Prewarm
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-pl.closedCh:
			return
		case <-t.C:
			pl.trim()
		}
	}
}

// trim closes up to min(lowIdle, live − Prewarm) idle instances.
func (pl *pool) trim() {
	n := min(pl.lowIdle.Swap(math.MaxInt64), int64(len(pl.idle)), int64(len(pl.slots)-pl.p.opts.Prewarm))
	for ; n > 0; n-- {
		select {
		case in := <-pl.idle:
			pl.release(in)
			pl.trimmed.Add(1)
		default:
			return
		}
	}
}

// add puts a new instance into a pool that has room (at load).
func (pl *pool) add(in *instance) {
	pl.slots <- struct{}{}
	pl.idle <- in
}

// tryGet returns an idle instance, or nil when there is none.
func (pl *pool) tryGet() (*instance, error) {
	if pl.closed.Load() {
		return nil, ErrClosed
	}
	select {
	case in := <-pl.idle:
		pl.took()
		return in, nil
	default:
		if pl.trims {
			pl.lowIdle.Store(0) // a call found none idle
		}
		return nil, nil
	}
}

// get returns an idle instance, creates one if the pool has room, or waits
// for one until ctx is done. Creating an instance is bounded by its own
// start-up time-out rather than by ctx, so that a caller in a hurry does not
// waste the work: the new instance serves the next call either way.
func (pl *pool) get(ctx context.Context) (*instance, error) {
	if in, err := pl.tryGet(); in != nil || err != nil {
		return in, err
	}
	select {
	case in := <-pl.idle:
		pl.took()
		return in, nil
	case pl.slots <- struct{}{}:
		if pl.closed.Load() {
			<-pl.slots
			return nil, ErrClosed
		}
		in, err := pl.p.newInstance(context.WithoutCancel(ctx))
		if err != nil {
			<-pl.slots
			return nil, err
		}
		return in, nil
	case <-pl.closedCh:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put gives an instance back. A broken instance is discarded; one that
// holds many configs no longer in use is recycled.
func (pl *pool) put(in *instance) {
	switch {
	case in.broken:
		pl.p.discarded.Add(1)
		pl.replace(in)
		return
	case in.stale():
		pl.p.recycled.Add(1)
		pl.replace(in)
		return
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed.Load() {
		pl.release(in)
		return
	}
	pl.idle <- in // never blocks: at most size instances exist
}

// release closes an instance and frees its slot.
func (pl *pool) release(in *instance) {
	in.close()
	<-pl.slots
}

// replace releases an instance and starts a replacement in the
// background, so that the pool stays warm.
func (pl *pool) replace(in *instance) {
	pl.release(in)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.closed.Load() {
		return
	}
	pl.refills.Add(1)
	go func() {
		defer pl.refills.Done()
		pl.refill()
	}()
}

// refill creates one instance if the pool holds fewer than Prewarm.
func (pl *pool) refill() {
	if len(pl.slots) >= pl.p.opts.Prewarm {
		return
	}
	select {
	case pl.slots <- struct{}{}:
	default:
		return
	}
	in, err := pl.p.newInstance(context.Background())
	if err != nil {
		<-pl.slots
		pl.p.log.Warn("replacing a discarded instance", "err", err)
		return
	}
	pl.put(in)
}

func (pl *pool) idleCount() int {
	if pl == nil {
		return 0
	}
	return len(pl.idle)
}

// close stops the pool: calls that have not started fail with ErrClosed;
// idle instances are closed at once and busy ones when they come back,
// until ctx is done.
func (pl *pool) close(ctx context.Context) {
	pl.mu.Lock()
	if pl.closed.Load() {
		pl.mu.Unlock()
		return
	}
	pl.closed.Store(true)
	close(pl.closedCh)
	pl.mu.Unlock()
	pl.refills.Wait()
	// Hold every slot: then no instance exists any more.
	for held := 0; held < pl.size; {
		select {
		case pl.slots <- struct{}{}:
			held++
		case in := <-pl.idle:
			pl.release(in)
		case <-ctx.Done():
			return
		}
	}
}
