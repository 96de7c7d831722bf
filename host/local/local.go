// Package local holds ruled's in-process decision helpers: the limiters
// that stand in for Redis under on_error: local, and the deny cache that
// spares Redis the requests of subjects already known to be denied.
package local

import (
	"fmt"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// MaxLimiters bounds the limiters kept at once; past it they are all
// dropped and started afresh (only while Redis is unavailable).
const MaxLimiters = 10_000

// Limiters are the in-process limiters of on_error: local rules, one per
// rule and config, created on first use with the share current then.
// They are safe for concurrent use.
type Limiters struct {
	mu  sync.Mutex
	m   map[limiterKey]*limiter
	now func() int64
}

type limiterKey struct {
	rule   string
	config string
	share  float64
}

type limiter struct {
	mu sync.Mutex
	l  sdk.LocalLimiter
}

// NewLimiters returns an empty set of limiters on the wall clock.
func NewLimiters() *Limiters {
	return &Limiters{m: map[limiterKey]*limiter{}, now: func() int64 { return time.Now().UnixMicro() }}
}

// Decide decides r in-process for rule with alg and cfg at the given share
// of the quota. It returns false when alg cannot decide locally.
func (ls *Limiters) Decide(rule string, alg sdk.Algorithm, cfg sdk.Config, share float64, r sdk.Request) (sdk.Decision, bool, error) {
	la, ok := alg.(sdk.LocalAlgorithm)
	if !ok {
		return sdk.Decision{}, false, nil
	}
	key := limiterKey{rule: rule, config: fmt.Sprintf("%#v", cfg), share: share}
	ls.mu.Lock()
	l := ls.m[key]
	if l == nil {
		if len(ls.m) >= MaxLimiters {
			clear(ls.m)
		}
		ll, err := la.NewLocal(cfg, share)
		if err != nil {
			ls.mu.Unlock()
			return sdk.Decision{}, false, err
		}
		l = &limiter{l: ll}
		ls.m[key] = l
	}
	ls.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.l.Decide(ls.now(), r), true, nil
}

// Reset forgets every limiter: Redis is back and holds the truth again.
func (ls *Limiters) Reset() {
	ls.mu.Lock()
	clear(ls.m)
	ls.mu.Unlock()
}

// Len returns the number of limiters held.
func (ls *Limiters) Len() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return len(ls.m)
}
