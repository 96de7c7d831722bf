package main

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// daemonGCPercent is the daemons' garbage collection target when GOGC is
// not set: the heap may grow to five times what is live before a cycle,
// instead of Go's twice. A decision allocates a few kilobytes and keeps
// none, so cycles come as often as the heap target allows; at 400 a
// decision costs about a tenth less CPU than at 100 for tens of megabytes
// more RSS (docs/operations.md, "Sizing").
const daemonGCPercent = 400

// memLimitShare is the share of the memory limit of ruled's cgroup (a
// container's limit) under which the collector keeps the heap when
// GOMEMLIMIT is not set: the higher target never runs a container out of
// memory that Go's default would have fitted in.
const memLimitShare = 0.9

// tuneGC sets the daemon's collector: daemonGCPercent unless GOGC is set,
// and a soft memory limit of memLimitShare of what limit reports unless
// GOMEMLIMIT is set. lookup reads the environment; limit is the memory
// limit's source (memlimit.FromCgroup in the daemons). It reports whether
// the daemon owns the target (GOGC is not set: staticHeap may move it).
func tuneGC(log *slog.Logger, lookup func(string) (string, bool), limit memlimit.Provider) (owned bool) {
	percent := "GOGC"
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
		percent = "default"
		owned = true
	}
	memLimit := "GOMEMLIMIT"
	if _, set := lookup("GOMEMLIMIT"); !set {
		n, err := limit()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit):
			memLimit = "none"
		case err != nil:
			memLimit = "none"
			log.Warn("gc: no memory limit from the cgroup", "err", err)
		default:
			debug.SetMemoryLimit(int64(float64(n) * memLimitShare))
			memLimit = "cgroup"
		}
	}
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	log.Info("gc", "percent", s[0].Value.Uint64(), "percent_from", percent, "memory_limit", s[1].Value.Uint64(), "memory_limit_from", memLimit)
	return owned
}

// minGCPercent is the lowest collector target staticHeap sets: Go's own
// default.
const minGCPercent = 100

// staticHeap keeps the daemon's heap goal at daemonGCPercent of what its
// work keeps live, not of the static data of the Wasm modules it has
// loaded: wazero holds a module's decoded code and data for as long as the
// module is loaded (about 9 MB for a built-in compiled from Go), and at
// GOGC=400 the heap would grow by four times that before each cycle. It
// measures what each module adds to the live heap as it loads, and after
// every cycle sets the target to daemonGCPercent × (live − static) / live
// (at least minGCPercent), so that the heap may grow by four times the
// rest, as it does without modules. With no module loaded the target stays
// daemonGCPercent. It runs only where the daemon owns the target (GOGC is
// not set).
type staticHeap struct {
	log    *slog.Logger
	loadMu sync.Mutex // one measured load at a time

	mu      sync.Mutex
	modules map[any]uint64 // live-heap bytes each loaded module added
	total   atomic.Uint64  // their sum
	percent atomic.Int64   // the target last set
	stopped atomic.Bool
}

// newStaticHeap returns a staticHeap that adjusts the collector after
// every cycle until ctx is done.
func newStaticHeap(ctx context.Context, log *slog.Logger) *staticHeap {
	h := &staticHeap{log: log, modules: map[any]uint64{}}
	h.percent.Store(daemonGCPercent)
	h.arm()
	context.AfterFunc(ctx, func() {
		h.stopped.Store(true)
		debug.SetGCPercent(daemonGCPercent)
	})
	return h
}

// gcSentinel is an object whose only use is to become garbage: its cleanup
// runs after the cycle that found it so. The pointer keeps it out of the
// tiny allocator, whose blocks are freed late.
type gcSentinel struct{ _ *byte }

// arm runs adjust after the next garbage collection, and arms again.
func (h *staticHeap) arm() {
	runtime.AddCleanup(&gcSentinel{}, func(h *staticHeap) {
		if !h.stopped.Load() {
			h.adjust()
			h.arm()
		}
	}, h)
}

// adjust sets the collector's target for the live heap of the last cycle.
func (h *staticHeap) adjust() {
	p := int64(staticPercent(daemonGCPercent, liveHeap(), h.total.Load()))
	if h.percent.Swap(p) != p {
		debug.SetGCPercent(int(p))
	}
}

// staticPercent is the target under which a heap of live bytes, static of
// them held by loaded modules, may grow by percent of the rest: percent ×
// (live − static) / live, at least minGCPercent.
func staticPercent(percent int, live, static uint64) int {
	if static == 0 || live == 0 {
		return percent
	}
	if static >= live {
		return minGCPercent
	}
	return max(minGCPercent, int(float64(percent)*float64(live-static)/float64(live)))
}

// liveHeap is the heap the last garbage collection found live, in bytes.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// measureLoad runs load, which loads a module (a Wasm module in the
// daemon), and records what it added to the live heap under what load
// returns, collecting garbage before and after.
func measureLoad[M comparable](h *staticHeap, load func() (M, error)) (M, error) {
	h.loadMu.Lock()
	defer h.loadMu.Unlock()
	runtime.GC()
	before := liveHeap()
	m, err := load()
	if err != nil {
		return m, err
	}
	runtime.GC()
	added := uint64(0)
	if after := liveHeap(); after > before {
		added = after - before
	}
	h.mu.Lock()
	h.modules[m] = added
	h.total.Add(added)
	h.mu.Unlock()
	h.log.Info("gc: a Wasm module's static heap counts once", "bytes", added, "static_bytes", h.total.Load())
	h.adjust()
	return m, nil
}

// forget stops counting a module that is being closed.
func (h *staticHeap) forget(m any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n, ok := h.modules[m]; ok {
		delete(h.modules, m)
		h.total.Add(-n)
	}
}
