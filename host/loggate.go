package host

import (
	"sync"
	"sync/atomic"
	"time"
)

// degradedLogEvery is the least time between two "decision degraded"
// warnings for one rule. During an outage every decision degrades; one line
// per rule every 10 s says so without flooding the log.
const degradedLogEvery = 10 * time.Second

// logGate lets one line per key through every degradedLogEvery and counts
// the ones it holds back. The zero value is ready; it is lock-free after a
// key's first line.
type logGate struct {
	keys sync.Map // key -> *gateSlot
}

type gateSlot struct {
	next       atomic.Int64 // unix nanoseconds before which lines are held back
	suppressed atomic.Int64 // lines held back since the last one let through
}

// allow reports whether a line for key may be written at now, and if so how
// many lines were held back since the previous one.
func (g *logGate) allow(key string, now time.Time) (ok bool, suppressed int64) {
	v, found := g.keys.Load(key)
	if !found {
		v, _ = g.keys.LoadOrStore(key, &gateSlot{})
	}
	s := v.(*gateSlot)
	t := now.UnixNano()
	next := s.next.Load()
	if t >= next && s.next.CompareAndSwap(next, t+int64(degradedLogEvery)) {
		return true, s.suppressed.Swap(0)
	}
	s.suppressed.Add(1)
	return false, 0
}
