package capability

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCircuitOpen is the error of a call refused because Redis failed
// recently: the call fails at once instead of waiting for a time-out.
var ErrCircuitOpen = errors.New("redis unavailable: circuit open")

// Breaker defaults.
const (
	// DefaultBreakerFailures is how many consecutive calls that found Redis
	// unavailable open the circuit.
	DefaultBreakerFailures = 3
	// DefaultBreakerCooldown is how long the circuit stays open before one
	// probe call may try Redis again.
	DefaultBreakerCooldown = 200 * time.Millisecond
)

// breaker is a circuit breaker over Redis availability. Closed: calls go
// through. After `failures` consecutive unavailable errors it opens: calls
// fail fast with ErrCircuitOpen. After `cooldown` it is half-open: one probe
// call goes through; success closes it, failure opens it again.
type breaker struct {
	node     string // the master it guards, for metrics
	failures int32
	cooldown time.Duration
	onChange func(open bool)

	consecutive atomic.Int32
	openUntil   atomic.Int64 // unix nanoseconds; 0 when closed
	probing     atomic.Bool
	mu          sync.Mutex // serialises state changes and their callbacks

	outage outage // calls to the master that found it unavailable, none answered since
}

func newBreaker(failures int, cooldown time.Duration, onChange func(bool)) *breaker {
	if failures <= 0 {
		failures = DefaultBreakerFailures
	}
	if cooldown <= 0 {
		cooldown = DefaultBreakerCooldown
	}
	return &breaker{failures: int32(failures), cooldown: cooldown, onChange: onChange}
}

// allow reports whether a call may go to Redis now, and whether it is the
// half-open probe.
func (b *breaker) allow() (ok, probe bool) {
	until := b.openUntil.Load()
	if until == 0 {
		return true, false
	}
	if time.Now().UnixNano() < until {
		return false, false
	}
	if b.probing.CompareAndSwap(false, true) {
		return true, true
	}
	return false, false
}

// open reports whether the circuit is open (or half-open).
func (b *breaker) open() bool { return b.openUntil.Load() != 0 }

// record notes the outcome of a call that was allowed.
func (b *breaker) record(unavailable, probe bool) {
	if !unavailable {
		b.consecutive.Store(0)
		if b.open() {
			b.mu.Lock()
			wasOpen := b.openUntil.Swap(0) != 0
			b.probing.Store(false)
			b.mu.Unlock()
			if wasOpen && b.onChange != nil {
				b.onChange(false)
			}
		}
		return
	}
	n := b.consecutive.Add(1)
	if n < b.failures && !probe {
		return
	}
	b.mu.Lock()
	wasOpen := b.openUntil.Swap(time.Now().Add(b.cooldown).UnixNano()) != 0
	b.probing.Store(false)
	b.mu.Unlock()
	if !wasOpen && b.onChange != nil {
		b.onChange(true)
	}
}
