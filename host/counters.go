package host

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/sdk"
)

// Counters are the admin operations on what rules count in Redis: a
// rule's subjects and their counters, page by page, and the removal of a
// rule's or one subject's counters. Engine.Counters returns them.
type Counters struct{ e *Engine }

// Counters returns the engine's Counters.
func (e *Engine) Counters() *Counters { return &e.counters }

// DefaultCounterPage is the number of subjects a page of Counters aims
// for when asked for none.
const DefaultCounterPage = 100

// MaxCounterPage is the most subjects a page of Counters aims for.
const MaxCounterPage = 1000

// counterPeeks is how many subjects of a page are peeked at at once.
const counterPeeks = 8

// ErrBadCursor is the error of Counters for a cursor it did not return.
var ErrBadCursor = capability.ErrBadCursor

// Counter is what a rule's plugin holds for one subject, read with a peek
// (a request of 0 hits, which consumes nothing).
type Counter struct {
	// Subject is the subject as the rule computed it; when Hashed is set,
	// the form keys hold it in ("#" and a hash: the subject was too long).
	Subject string
	Hashed  bool
	// Limit and Remaining are the peek's; Used is Limit - Remaining.
	Limit, Remaining, Used int64
	// Reset is the time until the quota is fully available again.
	Reset time.Duration
	// Limited is set when a request of one unit would be denied now.
	Limited bool
	// Err is why the subject could not be read: its limit is unknown (0).
	Err error
}

// CounterPage is one page of a rule's counters.
type CounterPage struct {
	Rule string
	// Counters are sorted with the subjects nearest to or over their
	// limit first (limited, then by the share of the limit used), those
	// that could not be read last.
	Counters []Counter
	// Next is the cursor of the next page; "" after the last page.
	Next string
}

// Page returns one page of the subjects a rule's plugin holds state
// for, each read with a peek: cursor is "" for the first page, else a
// page's Next; limit is how many subjects the page aims for
// (DefaultCounterPage when 0 or less, at most MaxCounterPage). A page's
// cost is bounded (capability.ScanSubjects): it may hold fewer subjects
// than limit, none even, and still have a Next.
//
// A rule with a dynamic config is peeked at with the config of an empty
// request; when that cannot be evaluated, every subject is listed with the
// error and an unknown limit. A subject that cannot be read is listed with
// its error; only a failed scan fails the page. An unknown rule is
// ErrNoRule; a cursor Counters did not return is ErrBadCursor.
func (cs *Counters) Page(ctx context.Context, rule, cursor string, limit int) (CounterPage, error) {
	g := cs.e.gen.Load()
	r, ok := g.set.Rule(rule)
	if !ok {
		return CounterPage{}, fmt.Errorf("%w %q", ErrNoRule, rule)
	}
	page := CounterPage{Rule: rule, Counters: []Counter{}}
	p := g.plugins[r.Plugin]
	if r.Exempt || p == nil {
		return page, nil // an exempt rule stores nothing
	}
	if limit <= 0 {
		limit = DefaultCounterPage
	}
	limit = min(limit, MaxCounterPage)
	found, err := p.reg.ScanSubjects(ctx, rule, cursor, limit)
	if err != nil {
		return CounterPage{}, fmt.Errorf("host: counters of rule %q: %w", rule, err)
	}
	page.Next = found.Next
	page.Counters = make([]Counter, len(found.Subjects))
	cfg, cfgErr := g.set.ConfigFor(r, nil)
	if cfgErr != nil {
		cfgErr = fmt.Errorf("the config of an empty request: %w", cfgErr)
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(counterPeeks, len(found.Subjects)) {
		wg.Go(func() {
			for i := range next {
				s := found.Subjects[i]
				c := &page.Counters[i]
				*c = Counter{Subject: s.Name, Hashed: s.Hashed, Err: cfgErr}
				if cfgErr == nil {
					cs.e.peekCounter(ctx, p, rule, s.Key, cfg, c)
				}
			}
		})
	}
	for i := range found.Subjects {
		next <- i
	}
	close(next)
	wg.Wait()
	slices.SortStableFunc(page.Counters, compareCounters)
	return page, nil
}

// peekCounter reads one subject's counter with a peek, bounded by the
// engine's decision time-out, and fills c.
func (e *Engine) peekCounter(ctx context.Context, p *plugin, rule, key string, cfg sdk.Config, c *Counter) {
	h := p.reg.HostForKey(rule, key, time.Now().Add(e.timeout))
	d, err := safeRun(ctx, p, h, cfg, sdk.Request{Subject: c.Subject, Hits: 0})
	if err != nil {
		c.Err = err
		return
	}
	c.Limit, c.Remaining, c.Reset = d.Limit, d.Remaining, d.Reset
	c.Used = max(d.Limit-d.Remaining, 0)
	c.Limited = !d.Allowed
}

// compareCounters orders counters with the subjects nearest to or over
// their limit first: those a request would be denied for now, then by the
// share of their limit used, then the fewest remaining; the counters that
// could not be read (or report no limit) last; ties by subject.
func compareCounters(a, b Counter) int {
	// A blocked subject (limit 0) is limited and known too.
	aKnown, bKnown := a.Err == nil && (a.Limit > 0 || a.Limited), b.Err == nil && (b.Limit > 0 || b.Limited)
	if aKnown != bKnown {
		if aKnown {
			return -1
		}
		return 1
	}
	if aKnown {
		if a.Limited != b.Limited {
			if a.Limited {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(usedShare(b), usedShare(a)); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Remaining, b.Remaining); c != 0 {
			return c
		}
	}
	return strings.Compare(a.Subject, b.Subject)
}

// usedShare is the share of its limit a counter has used; all of it for a
// block (limit 0).
func usedShare(c Counter) float64 {
	if c.Limit <= 0 {
		return 1
	}
	return float64(c.Used) / float64(c.Limit)
}

// Clear deletes every key a rule's plugin holds for the rule, for
// all subjects, on every Redis master, and returns how many keys it
// deleted: every subject starts afresh. It scans the whole keyspace
// (capability.Plugin.Clear). Keys the rule's name holds under another
// plugin (the rule's plugin before a reload) are left to expire. This
// instance's deny cache forgets the rule's subjects too; another instance's may deny a
// subject it cached as denied until that denial's retry-after. An unknown
// rule is ErrNoRule.
func (cs *Counters) Clear(ctx context.Context, rule string) (int64, error) {
	g := cs.e.gen.Load()
	r, ok := g.set.Rule(rule)
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrNoRule, rule)
	}
	p := g.plugins[r.Plugin]
	if r.Exempt || p == nil {
		return 0, nil // an exempt rule stores nothing
	}
	n, err := p.reg.Clear(ctx, rule)
	cs.e.deny.ForgetRule(rule)
	if err != nil {
		return n, fmt.Errorf("host: clear the counters of rule %q: %w", rule, err)
	}
	return n, nil
}

// Reset forgets everything a rule's plugin stores for one subject, and
// this instance's cached denial of it, so that the subject starts afresh. It returns the number of keys removed.
func (cs *Counters) Reset(ctx context.Context, rule, subject string) (int64, error) {
	g := cs.e.gen.Load()
	r, ok := g.set.Rule(rule)
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrNoRule, rule)
	}
	if r.Exempt {
		return 0, nil // an exempt rule stores nothing
	}
	// The subject starts afresh here too: no cached denial outlives it.
	cs.e.deny.Forget(local.Key{Rule: rule, Subject: subject})
	return g.plugins[r.Plugin].reg.Reset(ctx, rule, subject)
}

// ErrNoRule is the error of an operation on a rule the serving set lacks.
var ErrNoRule = errors.New("host: no rule")
