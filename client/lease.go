package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LeaseOptions tune client leases (see WithLeases). The zero value is the
// defaults.
type LeaseOptions struct {
	// MaxPermits bounds the permits one lease asks for. Each rule's
	// lease: N bounds it too; the smaller wins. Default 1000.
	MaxPermits int64
	// IdleReturn is how long a lease may go unused before its permits go
	// back to ruled. Default 100 ms.
	IdleReturn time.Duration
	// OnReturnError, when set, is told of a return that failed or came
	// too late (the permits then stay counted until their window ends).
	OnReturnError func(err error)
}

// Defaults of LeaseOptions.
const (
	DefaultLeasePermits = 1000
	DefaultIdleReturn   = 100 * time.Millisecond
)

// The timing of leases on the client's side.
const (
	// leaseHorizon is how far ahead a lease's size is planned: the permits
	// asked for are what the recent rate uses in this time.
	leaseHorizon = 250 * time.Millisecond
	// minPermits is the least a lease asks for once a request repeats.
	minPermits = 16
	// mappingTTL is how long a request's lease is trusted before it is
	// asked again (ruled's rules may have changed what it matches).
	mappingTTL = time.Second
	// refusedFor is how long a request that cannot lease (or whose lease
	// failed) goes to ruled per request before it tries leasing again.
	refusedFor = time.Second
	// maxDenyFor bounds how long a denial is kept without asking again.
	maxDenyFor = time.Second
	// returnBefore is how long before a lease's deadline its unused
	// permits go back; returnCutoff is when it is too late (ruled refuses
	// returns within 100 ms of the deadline).
	returnBefore = 300 * time.Millisecond
	returnCutoff = 150 * time.Millisecond
	// maxEntries bounds the requests remembered: past it, a new request
	// goes to ruled per request until the sweeper has forgotten requests
	// idle for entryIdle. maxWaits bounds the fills one request waits for.
	maxWaits     = 100
	maxEntries   = 100_000
	entryIdle    = 10 * time.Second
	leaseShards  = 32
	maxReturnsIn = 1000
	// maxHoldsIn bounds the holds (one per rule a lease counted) of the
	// returns in one call, as ruled bounds them (MaxLeaseReturnHolds).
	maxHoldsIn = 1000
)

// WithLeases makes Check decide in-process where ruled's rules allow it:
// for a request of one hit (Hits 0 or 1; no Peek, DedupID or BestEffort), the
// client takes a lease of permits from ruled (POST /v1/lease), grants from
// it, asks for the next one before it runs out, and returns what it did not
// use when the lease goes idle, before its deadline, and on Close. Requests
// whose rules do not allow leases (no lease: N, or a plugin that cannot
// lease), and requests of more hits, go to ruled one by one, as without
// leases.
//
// Requests share a lease when ruled's rules pick the same subjects for
// them; the client learns that from one call per distinct request (all of
// its fields and attrs), which decides that request alone. A field that
// differs on every request (a request id among the headers) makes every
// request distinct and leasing pointless: send ruled only what its rules
// use (MiddlewareOptions.Headers).
//
// A leased answer is what the rules would have said, within the bound
// docs/http.md gives ("Client leases"): a fixed window never admits more
// than its limit; a rolling window or token bucket can admit up to the
// lease size more per client in a window that starts within a second of a
// lease. Up to the lease size per client and subject can sit unused while
// other clients are denied. Its Results carry the lease's limits, with
// remaining counted from the lease, and a denial is kept for at most a
// second before ruled is asked again.
func WithLeases(o LeaseOptions) Option {
	return func(c *Client) {
		if o.MaxPermits <= 0 {
			o.MaxPermits = DefaultLeasePermits
		}
		if o.IdleReturn <= 0 {
			o.IdleReturn = DefaultIdleReturn
		}
		c.leases = newLeaser(c, o)
	}
}

// leaseable reports whether req may be decided from a lease: leases grant
// one hit per request (docs/http.md), so a request of more hits goes to
// ruled, which may deny it outright where leases would drain the quota
// trying to gather its hits.
func (r *CheckRequest) leaseable() bool {
	return (r.Hits == 0 || r.Hits == 1) && !r.Peek && r.DedupID == "" && r.LeaseID == "" && !r.BestEffort
}

// leaser holds a client's leases: by request (its fingerprint), the lease
// it decides from, and the leases themselves by what they hold (the rules
// and subjects), so that requests that pick the same subjects share one.
type leaser struct {
	c      *Client
	o      LeaseOptions
	seed   maphash.Seed
	shards [leaseShards]leaseShard
	// perShard bounds the requests a shard remembers (maxEntries in all);
	// entryIdle is how long a request goes unseen before it is forgotten.
	perShard  int
	entryIdle time.Duration

	mu       sync.Mutex
	byKey    map[string]*lease // by the rules and subjects they hold
	stop     chan struct{}
	done     chan struct{}
	closed   atomic.Bool
	inflight int        // fills under way
	idle     *sync.Cond // on mu: inflight dropped to 0
}

type leaseShard struct {
	mu sync.RWMutex
	m  map[string]*entry // by request fingerprint
}

// entry is what the client knows of one request (fingerprint).
type entry struct {
	req     CheckRequest // one hit; the body of its lease calls
	mu      sync.Mutex
	lease   *lease    // nil until a lease answered, and while refused
	until   time.Time // when to ask ruled again what the request matches (lease nil: refused until then)
	filling chan struct{}
	used    time.Time
}

// lease is permits for one set of rules and subjects.
type lease struct {
	mu        sync.Mutex
	batches   []batch   // oldest first; what they have left is available
	want      int64     // the next lease's size
	maxSize   int64     // what the rules allow in one lease
	filling   bool      // a background fill is under way
	results   []Result  // of the last fill, for answers
	policy    string    // RateLimit-Policy of the last fill
	filled    time.Time // when the last fill was sent
	grants    int64     // since the last fill was sent
	lastUse   time.Time
	denyUntil time.Time // a denial stands until then
	denyFirm  bool      // and may be answered without asking
	denial    *Answer   // its answer
}

// batch is the permits of one fill.
type batch struct {
	permits, used int64
	deadline      time.Time // grant none at or after it
	ticket        string
	holds         int // the rules that answered the lease: at least its holds
	req           *CheckRequest
}

func newLeaser(c *Client, o LeaseOptions) *leaser {
	l := &leaser{c: c, o: o, seed: maphash.MakeSeed(), byKey: map[string]*lease{}, perShard: maxEntries / leaseShards, entryIdle: entryIdle}
	l.idle = sync.NewCond(&l.mu)
	for i := range l.shards {
		l.shards[i].m = map[string]*entry{}
	}
	return l
}

// fingerprints pools the buffers requests are fingerprinted into.
var fingerprints = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// fingerprint appends an encoding of what ruled's rules can see of req
// (everything but hits and options) that two requests share only when
// they are equal.
func fingerprint(b []byte, req *CheckRequest) []byte {
	r := &req.Request
	for _, s := range [...]string{r.IP, r.Method, r.Path, r.Host, r.User} {
		b = appendField(b, s)
	}
	b = appendMap(b, r.Headers)
	b = appendMap(b, r.Query)
	return appendMap(b, req.Attrs)
}

func appendField(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// appendMap appends m's size, then its pairs in key order.
func appendMap(b []byte, m map[string]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	var small [16]string
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendField(appendField(b, k), m[k])
	}
	return b
}

// check decides req from a lease when it can; ok false sends it to ruled.
func (l *leaser) check(ctx context.Context, req *CheckRequest) (*Answer, bool, error) {
	if l.closed.Load() {
		return nil, false, nil
	}
	hits := max(req.Hits, 1)
	buf := fingerprints.Get().(*[]byte)
	fp := fingerprint((*buf)[:0], req)
	s := &l.shards[maphash.Bytes(l.seed, fp)%leaseShards]
	s.mu.RLock()
	e, full := s.m[string(fp)], len(s.m) >= l.perShard
	s.mu.RUnlock()
	if e == nil && !full {
		e = l.add(s, string(fp), req)
	}
	*buf = fp[:0]
	fingerprints.Put(buf)
	if e == nil { // too many requests remembered: ask ruled
		return nil, false, nil
	}

	// A request waits for at most maxWaits fills (its own or others'); when
	// they leave nothing for it, it goes to ruled.
	for round := 0; ; round++ {
		now := time.Now()
		e.mu.Lock()
		e.used = now
		ls := e.lease
		if ls == nil && now.Before(e.until) { // refused: ask per request until then
			e.mu.Unlock()
			return nil, false, nil
		}
		if ls != nil {
			a, v, low := ls.take(hits, now, e.filling != nil)
			if v == granted && (low || !now.Before(e.until)) {
				l.fillAsync(e, ls)
			}
			if v != empty {
				e.mu.Unlock()
				return a, v != askRuled, nil
			}
		}
		if round == maxWaits {
			e.mu.Unlock()
			return nil, false, nil
		}
		// Nothing to grant from: fill, or wait for the fill under way.
		wait := e.filling
		if wait == nil {
			e.filling = make(chan struct{})
			e.mu.Unlock()
			a, err := l.fill(ctx, e, ls, hits)
			if err != nil {
				return nil, false, err
			}
			if a != nil {
				return a, true, nil
			}
			continue
		}
		e.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, false, l.ctxError(ctx)
		}
	}
}

// ctxError is the error of a check whose caller's context ended while it
// waited for a lease: an UnreachableError, as Check's own call would give.
func (l *leaser) ctxError(ctx context.Context) error {
	return &UnreachableError{Op: "lease", URL: l.c.base + "/v1/lease", Err: ctx.Err()}
}

// add remembers a request seen for the first time; nil when its shard is
// full (the sweeper forgets idle requests).
func (l *leaser) add(s *leaseShard, fp string, req *CheckRequest) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[fp]; e != nil {
		return e
	}
	if len(s.m) >= l.perShard {
		return nil
	}
	one := *req
	one.Hits = 1
	e := &entry{req: one, used: time.Now()}
	s.m[fp] = e
	l.start()
	return e
}

// evictIdle forgets the requests not seen for entryIdle, except those with
// a fill under way.
func (l *leaser) evictIdle(now time.Time) {
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.mu.TryLock() {
				if e.filling == nil && now.Sub(e.used) > l.entryIdle {
					delete(s.m, k)
				}
				e.mu.Unlock()
			}
		}
		s.mu.Unlock()
	}
}

// verdict is what a lease can do for a request.
type verdict int

const (
	granted  verdict = iota // from the lease's permits
	denied                  // the lease's firm denial
	empty                   // too few permits: fill
	askRuled                // a denial the client may not keep: ask ruled
)

// take grants hits from the lease's batches, oldest first, or answers its
// firm denial; while a fill is pending, a request it cannot grant waits for
// the fill instead. low reports, on a grant, that the next lease should be
// asked for now.
func (ls *lease) take(hits int64, now time.Time, pending bool) (a *Answer, v verdict, low bool) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.expire(now)
	if ls.available() < hits {
		switch {
		case pending || !now.Before(ls.denyUntil):
			return nil, empty, false
		case !ls.denyFirm:
			return nil, askRuled, false
		}
		d := *ls.denial
		since := now.Sub(ls.filled)
		d.RetryAfter = max(d.RetryAfter-since, time.Millisecond)
		d.Results = slices.Clone(d.Results)
		for i := range d.Results {
			r := &d.Results[i]
			r.Reset, r.RetryAfter = max(r.Reset-since, 0), max(r.RetryAfter-since, 0)
		}
		return &d, denied, false
	}
	a, left := ls.grant(hits, now)
	return a, granted, !ls.filling && left*2 < ls.want
}

// available is the permits the batches have left; ls.mu is held.
func (ls *lease) available() int64 {
	var n int64
	for _, b := range ls.batches {
		n += b.permits - b.used
	}
	return n
}

// grant takes hits from the batches, oldest first, and returns the answer
// and the permits left; ls.mu is held and ls.available() is at least hits.
func (ls *lease) grant(hits int64, now time.Time) (*Answer, int64) {
	need, left := hits, int64(0)
	for i := range ls.batches {
		b := &ls.batches[i]
		n := min(need, b.permits-b.used)
		b.used += n
		need -= n
		left += b.permits - b.used
	}
	ls.grants += hits
	ls.lastUse = now
	return ls.answer(hits, now, left), left
}

// expire drops the batches whose deadline has come (their unused permits
// stay counted until their window ends) or that are used up.
func (ls *lease) expire(now time.Time) {
	i := 0
	for i < len(ls.batches) && (!now.Before(ls.batches[i].deadline) || ls.batches[i].used == ls.batches[i].permits) {
		i++
	}
	if i > 0 {
		ls.batches = slices.Delete(ls.batches, 0, i)
	}
}

// answer is the Answer of hits granted from the lease at now, with left
// permits left in it.
func (ls *lease) answer(hits int64, now time.Time, left int64) *Answer {
	var a *Answer
	if len(ls.results) == 1 { // the usual case: one allocation
		w := &struct {
			a Answer
			r [1]Result
		}{}
		a = &w.a
		a.Results = w.r[:]
	} else {
		a = &Answer{Results: make([]Result, len(ls.results))}
	}
	a.Allowed, a.StatusCode, a.Leased, a.policy = true, http.StatusOK, true, ls.policy
	since := now.Sub(ls.filled)
	for i, r := range ls.results {
		r.Allowed, r.Granted = true, hits
		if !r.Shadow {
			r.Remaining += left
		}
		r.Reset = max(r.Reset-since, 0)
		a.Results[i] = r
	}
	return a
}

// fillAsync asks for the next lease in the background; e.mu is held.
func (l *leaser) fillAsync(e *entry, ls *lease) {
	if e.filling != nil {
		return
	}
	ls.mu.Lock()
	if ls.filling {
		ls.mu.Unlock()
		return
	}
	ls.filling = true
	ls.mu.Unlock()
	e.filling = make(chan struct{})
	go func() { _, _ = l.fill(context.Background(), e, ls, 0) }()
}

// leaseAnswer is the JSON answer of POST /v1/lease.
type leaseAnswer struct {
	Leasable     bool         `json:"leasable"`
	Permits      int64        `json:"permits"`
	MaxPermits   int64        `json:"max_permits"`
	TTLMicros    int64        `json:"ttl_us"`
	RetryAfterMS int64        `json:"retry_after_ms"`
	DenyFirm     bool         `json:"deny_firm"`
	Lease        string       `json:"lease"`
	Results      []wireResult `json:"results"`

	policy string // the answer's RateLimit-Policy field
}

// fill takes a lease for e's request and files it under the rules and
// subjects it holds; e.filling is set, and is closed and cleared when done.
// It grants hits (when above 0) from the new permits first, to the request
// that asked for them, and returns that answer. A request that cannot
// lease, or whose lease failed, goes to ruled one by one for refusedFor;
// a lease call that failed because ctx ended changes nothing and returns
// ctx's error.
func (l *leaser) fill(ctx context.Context, e *entry, old *lease, hits int64) (*Answer, error) {
	// A request not seen before asks for itself alone: until ruled has
	// answered, the client cannot know which lease it shares, and a
	// request that never comes again (one carrying a request id) must not
	// take permits it would leave unused.
	want := hits
	if old != nil {
		want = old.nextSize(hits)
	}
	want = max(min(want, l.o.MaxPermits), hits, 1)
	sent := time.Now()
	var ans *leaseAnswer
	err := errClosed
	if l.beginFill() {
		ans, err = l.take(ctx, &e.req, want)
		defer l.endFill() // after the lease is filed, for close
	}
	if old != nil && hits == 0 { // the background fill fillAsync started
		old.mu.Lock()
		old.filling = false
		old.mu.Unlock()
	}
	e.mu.Lock()
	defer func() {
		close(e.filling)
		e.filling = nil
		e.mu.Unlock()
	}()
	if err != nil && ctx.Err() != nil { // the caller gave up: not ruled's failure
		return nil, l.ctxError(ctx)
	}
	if err != nil || !ans.Leasable {
		e.until, e.lease = sent.Add(refusedFor), nil
		return nil, nil
	}
	results := make([]Result, len(ans.Results))
	var key strings.Builder
	for i, r := range ans.Results {
		results[i] = r.result()
		key.WriteString(r.Rule)
		key.WriteByte(0)
		key.WriteString(r.Subject)
		key.WriteByte(0)
	}
	ls := l.leaseFor(key.String())
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.maxSize = max(ans.MaxPermits, 1)
	ls.results, ls.policy, ls.filled, ls.grants, ls.lastUse = results, ans.policy, sent, 0, sent
	if ans.Permits > 0 {
		ls.denyUntil = time.Time{}
		ls.batches = append(ls.batches, batch{permits: ans.Permits, deadline: sent.Add(time.Duration(ans.TTLMicros) * time.Microsecond), ticket: ans.Lease, holds: len(ans.Results), req: &e.req})
	} else {
		retry := ms(ans.RetryAfterMS)
		ls.denyUntil, ls.denyFirm = sent.Add(min(retry, maxDenyFor)), ans.DenyFirm
		ls.denial = &Answer{StatusCode: http.StatusTooManyRequests, RetryAfter: retry, Results: results, Leased: true, policy: ls.policy}
	}
	e.lease, e.until = ls, sent.Add(mappingTTL)
	if hits > 0 {
		now := time.Now()
		if ls.expire(now); ls.available() >= hits {
			a, _ := ls.grant(hits, now)
			return a, nil
		}
	}
	return nil, nil
}

// errClosed is the error of a fill after close.
var errClosed = errors.New("ruled client: closed")

// beginFill reports whether a fill may start (the leaser is open), and
// counts it in flight until endFill.
func (l *leaser) beginFill() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return false
	}
	l.inflight++
	return true
}

func (l *leaser) endFill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inflight--
	if l.inflight == 0 {
		l.idle.Broadcast()
	}
}

// nextSize is the size of the lease to ask for next: what the recent rate
// uses in leaseHorizon, less what is left, within what the rules allow.
func (ls *lease) nextSize(hits int64) int64 {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	want := ls.want
	if el := time.Since(ls.filled); el > 0 && ls.grants > 0 {
		rate := float64(ls.grants) / el.Seconds()
		want = int64(math.Ceil(rate * leaseHorizon.Seconds()))
	}
	want = min(max(want, minPermits), ls.maxSize)
	ls.want = want
	return max(want-ls.available(), hits)
}

// leaseFor returns the lease of key, adding it when there is none.
func (l *leaser) leaseFor(key string) *lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	ls := l.byKey[key]
	if ls == nil {
		ls = &lease{}
		l.byKey[key] = ls
	}
	return ls
}

// take calls POST /v1/lease.
func (l *leaser) take(ctx context.Context, req *CheckRequest, permits int64) (*leaseAnswer, error) {
	body := struct {
		Request Request           `json:"request"`
		Attrs   map[string]string `json:"attrs,omitempty"`
		Permits int64             `json:"permits"`
	}{req.Request, req.Attrs, permits}
	var a leaseAnswer
	h, err := l.c.call(ctx, "lease", "/v1/lease", body, &a)
	if err != nil {
		return nil, err
	}
	a.policy = h.Get("RateLimit-Policy")
	return &a, nil
}

// start runs the sweeper that returns idle leases, once.
func (l *leaser) start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stop != nil || l.closed.Load() {
		return
	}
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go l.sweep(l.stop, l.done)
}

// sweep returns idle leases' permits every half IdleReturn, and forgets
// idle requests every tenth of entryIdle, until stop.
func (l *leaser) sweep(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(max(l.o.IdleReturn/2, 10*time.Millisecond))
	defer t.Stop()
	evict := time.NewTicker(max(l.entryIdle/10, 10*time.Millisecond))
	defer evict.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			l.returnIdle(context.Background(), false)
		case now := <-evict.C:
			l.evictIdle(now)
		}
	}
}

// leaseReturn is one return of POST /v1/lease/return.
type leaseReturn struct {
	Request Request           `json:"request"`
	Attrs   map[string]string `json:"attrs,omitempty"`
	Lease   string            `json:"lease"`
	Unused  int64             `json:"unused"`
	holds   int               // not sent: bounds the returns per call
}

// returnIdle gives back the unused permits of leases idle for IdleReturn
// or near their deadline (all of them, when all is set), and forgets
// leases that hold nothing and went idle.
func (l *leaser) returnIdle(ctx context.Context, all bool) error {
	now := time.Now()
	var rets []leaseReturn
	l.mu.Lock()
	for key, ls := range l.byKey {
		ls.mu.Lock()
		ls.expire(now)
		idle := now.Sub(ls.lastUse) >= l.o.IdleReturn
		kept := ls.batches[:0]
		for _, b := range ls.batches {
			left := b.deadline.Sub(now)
			unused := b.permits - b.used
			if (all || idle || left < returnBefore) && left > returnCutoff && b.ticket != "" {
				rets = append(rets, leaseReturn{Request: b.req.Request, Attrs: b.req.Attrs, Lease: b.ticket, Unused: unused, holds: b.holds})
				continue
			}
			kept = append(kept, b)
		}
		ls.batches = kept
		if len(ls.batches) == 0 && !ls.filling && now.Sub(ls.lastUse) > 10*time.Second && now.After(ls.denyUntil) {
			delete(l.byKey, key)
		}
		ls.mu.Unlock()
	}
	l.mu.Unlock()
	var errs []error
	for len(rets) > 0 {
		n := returnChunk(rets)
		if err := l.giveBack(ctx, rets[:n]); err != nil {
			errs = append(errs, err)
			if l.o.OnReturnError != nil {
				l.o.OnReturnError(err)
			}
		}
		rets = rets[n:]
	}
	return errors.Join(errs...)
}

// returnChunk is how many of rets, from the first, go in one call: at
// most maxReturnsIn, holding at most maxHoldsIn holds (at least one).
func returnChunk(rets []leaseReturn) int {
	n, holds := 0, 0
	for n < len(rets) && n < maxReturnsIn && (n == 0 || holds+rets[n].holds <= maxHoldsIn) {
		holds += rets[n].holds
		n++
	}
	return n
}

// giveBack calls POST /v1/lease/return.
func (l *leaser) giveBack(ctx context.Context, rets []leaseReturn) error {
	body := struct {
		Returns []leaseReturn `json:"returns"`
	}{rets}
	var out struct {
		Late   int      `json:"late"`
		Errors []string `json:"errors"`
	}
	if _, err := l.c.call(ctx, "lease return", "/v1/lease/return", body, &out); err != nil {
		return err
	}
	if out.Late > 0 { // their units stay counted until their window ends
		out.Errors = append(out.Errors, fmt.Sprintf("%d returns came too late, within 100 ms of their lease's end", out.Late))
	}
	if len(out.Errors) > 0 {
		return fmt.Errorf("ruled lease return: %s", strings.Join(out.Errors, "; "))
	}
	return nil
}

// close stops the sweeper and returns every lease's unused permits.
func (l *leaser) close(ctx context.Context) error {
	l.mu.Lock()
	l.closed.Store(true)
	stop, done := l.stop, l.done
	l.stop = nil
	for l.inflight > 0 { // their permits are filed before they end
		l.idle.Wait()
	}
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return l.returnIdle(ctx, true)
}
