// Package local holds ruled's in-process decision helpers: the limiters
// built from plugins' local models (which stand in for Redis under
// on_error: local, and decide offline for ruled test and ruled replay),
// and the deny cache that spares Redis the requests of subjects already
// known to be denied.
package local

import (
	"fmt"
	"sync"

	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// MaxLimiters bounds the limiters the engine keeps at once; past it they
// are all dropped and started afresh (only while Redis is unavailable).
const MaxLimiters = 10_000

// Limiters are in-process limiters, one per rule, config and share,
// created on first use from the rule's plugin (sdk.LocalAlgorithm): the
// engine's stand-ins for Redis under on_error: local, and the Simulator's
// models. They are safe for concurrent use.
type Limiters struct {
	mu  sync.Mutex
	m   map[limiterKey]*limiter
	max int
}

// limiterKey names a limiter: the rule (of one loaded set), the config it
// resolved to when the rule's config is dynamic, and the share.
type limiterKey struct {
	rule   *rules.Rule
	config string
	share  float64
}

type limiter struct {
	mu sync.Mutex
	l  sdk.LocalLimiter
}

// NewLimiters returns an empty set of limiters that holds at most max of
// them, dropping them all when a new one would pass it; 0 means no bound.
func NewLimiters(max int) *Limiters {
	return &Limiters{m: map[limiterKey]*limiter{}, max: max}
}

// Decide decides r at nowUS (a Unix time in microseconds) in-process, for
// sel's rule at the given share of its quota. It returns false when the
// rule's plugin cannot decide locally.
func (ls *Limiters) Decide(nowUS int64, sel rules.Selection, share float64, r sdk.Request) (sdk.Decision, bool, error) {
	la, ok := sel.Rule.Algorithm().(sdk.LocalAlgorithm)
	if !ok {
		return sdk.Decision{}, false, nil
	}
	key := limiterKey{rule: sel.Rule, share: share}
	if sel.Rule.Dynamic() {
		// The config's printed values (its String, where it has one), not
		// the config itself: a config may hold pointers (fixedwindow's
		// calendar cache) that a new Configure call of the same values
		// renews.
		key.config = fmt.Sprint(sel.Config)
	}
	ls.mu.Lock()
	l := ls.m[key]
	if l == nil {
		if ls.max > 0 && len(ls.m) >= ls.max {
			clear(ls.m)
		}
		ll, err := la.NewLocal(sel.Config, share)
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
	return l.l.Decide(nowUS, r), true, nil
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
