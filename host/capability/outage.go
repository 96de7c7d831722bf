package capability

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// outageFresh is how recent the last call that found Redis unavailable
// must be for an outage of calls to count against readiness: once calls
// stop (a load balancer took the instance out), the probe alone decides.
const outageFresh = time.Second

// outage follows the calls that find Redis unavailable (they time out,
// the connection fails, or the circuit is open) with no call answered
// since: decisions degrade to their on_error while it lasts.
type outage struct {
	since atomic.Int64 // unix nanoseconds of the first such call since one was answered; 0: none
	last  atomic.Int64 // unix nanoseconds of the latest such call

	mu      sync.Mutex
	lastErr error // the latest such call's error
	node    string
}

// failed notes a call that found Redis unavailable.
func (o *outage) failed(node string, err error) {
	now := time.Now().UnixNano()
	o.since.CompareAndSwap(0, now)
	o.last.Store(now)
	o.mu.Lock()
	o.lastErr, o.node = err, node
	o.mu.Unlock()
}

// answered notes a call that Redis answered: the outage, if any, is over.
func (o *outage) answered() {
	if o.since.Load() != 0 {
		o.since.Store(0)
	}
}

// err returns why decisions are degrading when calls have found Redis
// unavailable for longer than window, none answered since, the latest no
// longer than outageFresh ago; else nil.
func (o *outage) err(now time.Time, window time.Duration) error {
	since, last := o.since.Load(), o.last.Load()
	if since == 0 || last-since <= int64(window) || now.UnixNano()-last > int64(outageFresh) {
		return nil
	}
	o.mu.Lock()
	err, node := o.lastErr, o.node
	o.mu.Unlock()
	if node == "" {
		node = "redis"
	}
	return fmt.Errorf("decisions degraded for %v: no call answered by %s since (over the breaker's %v): %w",
		time.Duration(now.UnixNano()-since).Round(time.Millisecond), node, window, err)
}
