// Package rlqs serves Envoy's rate limit quota service (RLQS,
// envoy.service.rate_limit_quota.v3): Envoy's rate_limit_quota filter, and
// proxyless gRPC, decide locally on the quota the server assigns to each
// bucket of requests and report their usage on a stream. ruled assigns each
// bucket of a stream a token bucket backed by units taken from Redis through
// the rules, as client leases take them (host.ClientLeases), so that what a
// client may admit is counted before it admits it.
//
// A bucket's id (a string map) plus "domain" are the attrs the rules match,
// as an RLS descriptor's entries are. A bucket no rule limits is assigned
// ALLOW_ALL, one that a rule denies now (its quota spent, or a limit of 0)
// DENY_ALL. A rule without lease: N leases Options.LimitShare of its
// limit at a time. A bucket whose rules cannot lease (a plugin without
// leasable grants; no lease: N with LimitShare 0) follows the on_error of
// the rule that cannot: deny is DENY_ALL, allow and local ALLOW_ALL.
//
// The accounting. Envoy's token bucket starts full, refills continuously,
// and keeps its tokens when a new assignment changes only the refill (it
// scales them by the new capacity over the old one when that changes); an
// assignment lasts its time to live unless renewed. So what a client may
// admit from its last report is bounded by the tokens it had then (a full
// bucket, as far as the server knows), each bucket it started full since,
// and every refill until its assignment runs out. Every Tick the server
// renews each bucket's assignment and first takes what that bound needs
// beyond what it holds for the client; when a report says what the client
// used, what it holds beyond the bound goes back to the rules
// (host.ClientLeases.GiveBack). A take lasts until its window resets (its
// rules' earliest reset): units a client was granted in one window and
// may spend in the next are taken again there. When the stream ends, or
// its client stops reporting a bucket, what the client did not report
// using goes back once its assignments have run out. docs/envoy.md ("Rate
// limit quota") gives the bound this leaves.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/rules"
)

// DomainAttr is the attr that holds a stream's domain, as RLS's does.
const DomainAttr = "domain"

// Limits on what one stream may ask of the server.
const (
	MaxBuckets     = 10_000 // buckets one stream may report
	MaxBucketAttrs = 32     // entries of one bucket id
	maxAttrLen     = 1024   // bytes of one key or value
)

// maxTakes bounds the takes one bucket makes in one renewal, the first
// take of a bucket (of one permit, to learn the lease size) among them.
const maxTakes = 5

// takeFor is how long a take lasts when its rules give no reset.
const takeFor = time.Hour

// slowFill is the fill interval of a token bucket assigned while quota is
// short: one token an hour, next to none (Envoy needs a refill).
const slowFill = time.Hour

// sendSlack is how long after it is sent an assignment may reach its
// client, whose time to live starts then: the refill is counted that
// much longer.
const sendSlack = 250 * time.Millisecond

// unknownInterval is a bucket's reporting interval until its reports
// have said (Envoy's filter reports a new bucket at once, then every
// interval of its configuration).
const unknownInterval = time.Minute

// Quota is what the server needs of the engine: host.ClientLeases.
type Quota interface {
	Take(ctx context.Context, req *host.LeaseRequest) (host.ClientLease, error)
	GiveBack(ctx context.Context, ret *host.LeaseReturn) (int64, error)
	// Rules is the rule set Take decides on now; a bucket's assignment is
	// decided again, with a take, when it changes.
	Rules() *rules.Set
}

// Options configure a Server.
type Options struct {
	// Tick is how often a stream's assignments are renewed (DefaultTick
	// when 0). A rule reload reaches the clients within one Tick.
	Tick time.Duration
	// TTL is each assignment's time to live, in whole seconds and longer
	// than Tick (DefaultTTL when 0): how long a client goes on with its
	// assignment when ruled stops renewing it.
	TTL time.Duration
	// LimitShare, above 0, lets rules without lease: N lease to the
	// clients too, at most this share of their limit at a time (rounded
	// up, at least 1): host.LeaseRequest.LimitShare. 0: those rules are
	// answered by their on_error. At most 1.
	LimitShare float64
	// Log receives the streams' errors; slog.Default when nil.
	Log *slog.Logger
}

// Defaults of Options.
const (
	DefaultTick = time.Second
	DefaultTTL  = 3 * time.Second
)

// Server is the RLQS service.
type Server struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	q    Quota
	opts Options
	log  *slog.Logger
	// warnings lets through one line of each kind of warning every
	// warnEvery: during an outage every bucket of every stream fails at
	// every tick, and a client chooses how many buckets it has.
	warnings *lograte.Gate
	// life is the server's: when it is done the streams end, and so do
	// the give-backs of ended streams, which outlive them.
	life context.Context
}

// NewServer returns the RLQS service of q, until ctx is done: then its
// streams end (an Unavailable error) and what they hold stays counted
// until its window ends.
func NewServer(ctx context.Context, q Quota, opts Options) (*Server, error) {
	if opts.Tick <= 0 {
		opts.Tick = DefaultTick
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL%time.Second != 0 || opts.TTL <= opts.Tick {
		return nil, fmt.Errorf("rlqs: the assignments' TTL must be whole seconds and longer than the tick %v, got %v", opts.Tick, opts.TTL)
	}
	if err := host.CheckLimitShare(opts.LimitShare); err != nil {
		return nil, fmt.Errorf("rlqs: limit share %v: %w", opts.LimitShare, err)
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &Server{q: q, opts: opts, log: log.With("component", "rlqs"), warnings: lograte.NewGate(warnEvery), life: ctx}, nil
}

// warnEvery is the least time between two warnings of one kind, as for
// the engine's degraded decisions.
const warnEvery = 10 * time.Second

// warn logs msg at WARN unless a line of it was written within warnEvery;
// the next line written says how many were held back ("suppressed").
func (s *Server) warn(msg string, args ...any) {
	if ok, n := s.warnings.Allow(msg, time.Now()); ok {
		s.log.Warn(msg, append(args, "suppressed", n)...)
	}
}

// StreamRateLimitQuotas serves one client's stream: it answers each new
// bucket at once and renews every bucket's assignment every Tick.
func (s *Server) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	ctx := stream.Context()
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	st := &streamState{s: s, buckets: map[string]*bucket{}}
	defer st.end()
	tick := time.NewTicker(s.opts.Tick)
	defer tick.Stop()
	for {
		var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
		select {
		case r := <-reports:
			var err error
			if actions, err = st.report(ctx, r, time.Now()); err != nil {
				return err
			}
		case <-tick.C:
			actions = st.renew(ctx, time.Now())
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.life.Done():
			return status.Error(codes.Unavailable, "rlqs: the server is shutting down")
		}
		if len(actions) == 0 {
			continue
		}
		if err := stream.Send(&rlqsv3.RateLimitQuotaResponse{BucketAction: actions}); err != nil {
			return err
		}
	}
}

// streamState is one stream's buckets.
type streamState struct {
	s       *Server
	domain  string
	buckets map[string]*bucket
}

// kind is the kind of a bucket's assignment.
type kind int

const (
	none kind = iota
	allowAll
	denyAll
	tokenBucket
)

// bucket is one bucket of a stream and the server's ledger for it.
type bucket struct {
	id    *rlqsv3.BucketId
	attrs map[string]string
	kind  kind
	// capacity and perSec are the token bucket assigned (its refill a
	// second), while kind is tokenBucket; lease is the rules' lease size,
	// 0 until a take has said.
	capacity, lease int64
	perSec          float64
	// expires is when the last assignment sent runs out.
	expires time.Time
	// bound is the most the client may have admitted from its last report
	// until boundAt, under the assignments sent: the tokens it had then,
	// the buckets it started full since and their refills (boundUntil).
	bound   float64
	boundAt time.Time
	// reported is when the last report came; demand its requests a
	// second; interval the time its last report covered.
	reported time.Time
	demand   float64
	interval time.Duration
	// owed is what the client reported admitting beyond what was taken for
	// it (its first requests, admitted before any assignment, and any
	// after one ran out): the next renewal takes it, as used.
	owed int64
	// free is set while the client may admit without counting: an
	// ALLOW_ALL was sent since its last report. What it reports beyond
	// its takes then is not owed (as an exempt rule, or on_error: allow
	// while Redis is unreachable, count nothing).
	free  bool
	takes []*take // live, oldest first
	// rules is the rule set of the last take.
	rules *rules.Set
}

// take is units counted for a bucket by one Take.
type take struct {
	lease    host.ClientLease
	deadline time.Time // when its units leave their window
	used     int64     // granted by the client, by its reports
	back     int64     // given back
}

func (t *take) unused() int64 { return t.lease.Permits - t.used - t.back }

// held is what the server holds for b's client: taken, not yet used.
func (b *bucket) held(now time.Time) int64 {
	var n int64
	for _, t := range b.takes {
		if now.Before(t.deadline) {
			n += t.unused()
		}
	}
	return n
}

// boundUntil is the most b's client may have admitted from its last
// report until t: bound, and the live token bucket's refill since
// boundAt.
func (b *bucket) boundUntil(t time.Time) float64 {
	n := b.bound
	if b.kind == tokenBucket {
		if end := minTime(t, b.expires.Add(sendSlack)); end.After(b.boundAt) {
			n += b.perSec * end.Sub(b.boundAt).Seconds()
		}
	}
	return n
}

// added is how many tokens a token bucket of capacity c sent at now adds
// to what b's client may admit: a full bucket where it has none live;
// where it has, Envoy scales its tokens by c over the old capacity,
// which adds at most the difference.
func (b *bucket) added(c int64, now time.Time) int64 {
	if b.kind != tokenBucket || !now.Before(b.expires) {
		return c
	}
	return max(c-b.capacity, 0)
}

// worst is what b's client may admit at most from its last report until
// h if a token bucket of capacity c refilled at perSec is sent at now.
func (b *bucket) worst(c int64, perSec float64, now, h time.Time) int64 {
	return admits(b.boundUntil(now) + float64(b.added(c, now)) + perSec*h.Add(sendSlack).Sub(now).Seconds())
}

// admits is how many requests tokens admit: each takes a whole one
// (rounding errors counted against the client).
func admits(tokens float64) int64 { return int64(math.Floor(tokens + 1e-6)) }

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// report takes a usage report: new buckets are answered at once; the
// others' usage is reconciled with what was taken.
func (st *streamState) report(ctx context.Context, r *rlqsv3.RateLimitQuotaUsageReports, now time.Time) ([]*rlqsv3.RateLimitQuotaResponse_BucketAction, error) {
	if st.domain == "" {
		if r.GetDomain() == "" {
			return nil, status.Error(codes.InvalidArgument, "rlqs: the first report must name the domain")
		}
		st.domain = r.GetDomain()
	} else if d := r.GetDomain(); d != "" && d != st.domain {
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: the stream's domain is %q; open another stream for %q", st.domain, d)
	}
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for i, u := range r.GetBucketQuotaUsages() {
		key, err := bucketKey(u.GetBucketId())
		if err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d]: %v", i, err)
		}
		b, ok := st.buckets[key]
		if !ok {
			if len(st.buckets) >= MaxBuckets {
				return nil, status.Errorf(codes.ResourceExhausted, "rlqs: a stream may report at most %d buckets", MaxBuckets)
			}
			b = &bucket{id: u.GetBucketId(), attrs: st.attrs(u.GetBucketId())}
			st.buckets[key] = b
		}
		live := now.Before(b.expires)
		if beyond := b.use(int64(min(u.GetNumRequestsAllowed(), math.MaxInt64))); !b.free {
			b.owed += beyond
		}
		b.free = b.kind == allowAll && live
		// From now on, the client may admit the tokens it has (at most a
		// full bucket) and the refill.
		b.reported, b.bound, b.boundAt = now, 0, now
		if b.kind == tokenBucket && live {
			b.bound = float64(b.capacity)
		}
		if e := u.GetTimeElapsed().AsDuration(); e >= time.Second {
			b.demand = float64(u.GetNumRequestsAllowed()+u.GetNumRequestsDenied()) / e.Seconds()
			b.interval = e
		}
		if !live {
			// New, or its assignment ran out (ruled could not renew it,
			// or stopped when its reports did): answered at once.
			if a := st.assign(ctx, b, now); a != nil {
				actions = append(actions, a)
			}
			continue
		}
		st.giveBackExcess(ctx, b, now)
	}
	return actions, nil
}

// renew renews the assignment of every bucket whose client still reports
// it. A bucket unreported for two of its intervals (a client frozen, or
// gone with its stream still open) is renewed no more: once its
// assignment has run out, what its client did not report using goes
// back, and the bucket is forgotten (a later report names it anew).
func (st *streamState) renew(ctx context.Context, now time.Time) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var actions []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for key, b := range st.buckets {
		if st.silent(b, now) {
			if !now.Before(b.expires) {
				st.settle(ctx, b, now)
				delete(st.buckets, key)
			}
			continue
		}
		if a := st.assign(ctx, b, now); a != nil {
			actions = append(actions, a)
		}
	}
	return actions
}

// silent reports whether b's client has not reported it for two of its
// reporting intervals and a tick.
func (st *streamState) silent(b *bucket, now time.Time) bool {
	interval := b.interval
	if interval == 0 {
		interval = unknownInterval
	}
	return now.Sub(b.reported) > 2*interval+st.s.opts.Tick
}

// attrs is what the rules see of a bucket.
func (st *streamState) attrs(id *rlqsv3.BucketId) map[string]string {
	attrs := make(map[string]string, len(id.GetBucket())+1)
	for k, v := range id.GetBucket() {
		attrs[k] = v
	}
	attrs[DomainAttr] = st.domain
	return attrs
}

// use credits n units the client granted to b's takes, oldest first, and
// returns what no take held: requests the client admitted without an
// assignment, which the next renewal counts (owed).
func (b *bucket) use(n int64) int64 {
	for _, t := range b.takes {
		if n <= 0 {
			break
		}
		k := min(n, t.unused())
		t.used += k
		n -= k
	}
	return n
}

// assign decides b's next assignment, taking what it needs first, and
// returns it; nil when the rules could not be asked (the client goes on
// with its assignment until it expires).
func (st *streamState) assign(ctx context.Context, b *bucket, now time.Time) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	ttl := st.s.opts.TTL
	h := now.Add(ttl)
	b.takes = slices.DeleteFunc(b.takes, func(t *take) bool { return !now.Before(t.deadline) })
	c, r := b.lease, b.wantRate()
	next := tokenBucket
	set := st.s.q.Rules()
	for range maxTakes {
		held := b.held(now)
		need := b.worst(c, r, now, h) - held + b.owed
		if b.lease > 0 && need <= 0 && b.rules == set {
			break
		}
		if b.rules != set {
			// The rules changed: ask them again, and learn the lease
			// size anew.
			b.rules, b.lease, c, r = set, 0, 0, 0
		}
		// The first take learns the lease size (a rule sized by its limit
		// tells it once it granted); the others ask for at most that.
		ask := int64(1)
		if b.lease > 0 {
			ask = min(max(need, 1), b.lease)
		}
		cl, err := st.s.q.Take(ctx, &host.LeaseRequest{Attrs: b.attrs, Permits: ask, LimitShare: st.s.opts.LimitShare})
		if err != nil {
			return st.failed(b, cl.OnError, err, now, ttl)
		}
		switch {
		case !cl.Leasable:
			next = allowAll
			if cl.OnError == rules.OnErrorDeny {
				next = denyAll
			}
		case len(cl.Results) == 0:
			next = allowAll // no rule limits the bucket
		}
		if next != tokenBucket {
			// Nothing was counted: no rule that can lease matched, and
			// none counts what the client admitted before.
			b.owed = 0
			return b.send(next, 0, 0, now, ttl)
		}
		if b.lease == 0 && cl.Permits > 0 {
			b.lease = cl.MaxPermits
			c, r = b.lease, b.wantRate()
		}
		if cl.Permits == 0 && blocks(cl) {
			// A limit of 0 (a reload may have set it): what is held goes
			// back at the next report, and nothing more can be counted.
			b.owed = 0
			return b.send(denyAll, 0, 0, now, ttl)
		}
		if cl.Permits > 0 {
			b.takes = append(b.takes, &take{lease: cl, deadline: now.Add(windowLeft(cl))})
			b.owed = b.use(b.owed)
		}
		if cl.Permits < min(ask, cl.MaxPermits) {
			// The rules granted what they could: what is still owed
			// was admitted beyond them.
			b.owed = 0
			break
		}
	}
	if c == 0 {
		return b.send(denyAll, 0, 0, now, ttl)
	}
	// Fit the assignment to what is held: a lower refill or, while quota
	// is short, a full bucket of what is left with next to no refill.
	held := b.held(now)
	if b.worst(c, r, now, h) > held {
		span := h.Add(sendSlack).Sub(now).Seconds()
		room := float64(held) - b.boundUntil(now) // tokens that may be added
		if r = math.Floor((room - float64(b.added(c, now))) / span); r < 1 {
			if b.added(c, now) != c {
				// The client's bucket is live: what it may still hold
				// (all of it, as far as ruled knows) is held for it. A
				// DENY_ALL ends it; the next report gives that back,
				// and the next renewal a full bucket of what it gets.
				return b.send(denyAll, 0, 0, now, ttl)
			}
			r = 1 / slowFill.Seconds()
			c = min(c, int64(math.Floor(room-r*span))+1)
			if b.worst(c, r, now, h) > held {
				c-- // the refill makes the last token whole
			}
			if c < 1 {
				return b.send(denyAll, 0, 0, now, ttl)
			}
		}
	}
	return b.send(tokenBucket, c, r, now, ttl)
}

// failed answers a bucket whose quota could not be taken (Redis
// unreachable, a plugin failing) as its rules' strictest on_error says:
// deny is DENY_ALL, allow ALLOW_ALL; local sends nothing, so that the
// client's assignment runs out and its own fallback (Envoy's
// expired_assignment_behavior) decides.
func (st *streamState) failed(b *bucket, onError rules.OnError, err error, now time.Time, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	st.s.warn("rlqs: taking quota failed; the rules' on_error decides", "domain", st.domain, "bucket", b.id.GetBucket(), "on_error", onError, "err", err)
	switch onError {
	case rules.OnErrorDeny:
		return b.send(denyAll, 0, 0, now, ttl)
	case rules.OnErrorLocal:
		return nil
	}
	return b.send(allowAll, 0, 0, now, ttl)
}

// wantRate is the refill a second b's client is to be assigned: its
// demand and a quarter more, at least 1 and at most the lease size.
func (b *bucket) wantRate() float64 {
	if b.lease == 0 {
		return 0
	}
	if b.demand == 0 && b.kind != tokenBucket {
		return float64(b.lease) // no demand known yet
	}
	return float64(min(max(int64(math.Ceil(b.demand*1.25)), 1), b.lease))
}

// blocks reports whether a rule that cl asked admits nothing at all: a
// limit of 0, not a quota spent for now.
func blocks(cl host.ClientLease) bool {
	return slices.ContainsFunc(cl.Results, func(rr host.RuleResult) bool { return !rr.Allowed && !rr.Shadow && rr.Limit == 0 })
}

// windowLeft is how long cl's units stay in their window: until the
// earliest reset of its rules.
func windowLeft(cl host.ClientLease) time.Duration {
	left := takeFor
	for _, rr := range cl.Results {
		if rr.Granted > 0 && rr.Reset > 0 {
			left = min(left, rr.Reset)
		}
	}
	return left
}

// send records the assignment sent at now as b's and returns its action:
// for a token bucket, of capacity c refilled at perSec a second (1 a
// second or more, or 1 every slowFill).
func (b *bucket) send(k kind, c int64, perSec float64, now time.Time, ttl time.Duration) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	b.bound, b.boundAt = b.boundUntil(now), now
	if k == tokenBucket {
		b.bound += float64(b.added(c, now))
	}
	b.kind, b.capacity, b.perSec, b.expires = k, c, perSec, now.Add(ttl)
	b.free = b.free || k == allowAll
	var strategy *typev3.RateLimitStrategy
	switch k {
	case allowAll:
		strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	case denyAll:
		strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	default:
		perFill, every := uint32(min(perSec, math.MaxUint32)), time.Second
		if perSec < 1 {
			perFill, every = 1, slowFill
		}
		strategy = &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: uint32(min(c, math.MaxUint32)), TokensPerFill: wrapperspb.UInt32(perFill),
			FillInterval: durationpb.New(every)}}}
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(ttl), RateLimitStrategy: strategy}}}
}

// giveBackExcess gives back what b holds beyond what its client may still
// admit under its assignment, newest takes first.
func (st *streamState) giveBackExcess(ctx context.Context, b *bucket, now time.Time) {
	keep := int64(0)
	if b.kind == tokenBucket && now.Before(b.expires) {
		keep = admits(b.boundUntil(b.expires.Add(sendSlack)))
	}
	excess := b.held(now) - keep
	for i := len(b.takes) - 1; i >= 0 && excess > 0; i-- {
		t := b.takes[i]
		if !now.Before(t.deadline) {
			continue
		}
		n := min(excess, t.unused())
		excess -= n
		st.giveBack(ctx, b, t, n)
	}
}

// giveBack gives n of t's unused units back to its rules: a take that
// has given back before is returned as the lease of what it has left.
func (st *streamState) giveBack(ctx context.Context, b *bucket, t *take, n int64) {
	n = min(n, t.unused())
	holds := t.lease.Holds()
	if n <= 0 || len(holds) == 0 {
		return
	}
	for i := range holds {
		holds[i].Taken = max(holds[i].Taken-t.back, 0)
	}
	ret := &host.LeaseReturn{Attrs: b.attrs, Permits: t.lease.Permits - t.back, Unused: n, Holds: holds, Deadline: t.deadline,
		LimitShare: st.s.opts.LimitShare}
	t.back += n // given back or not, the server holds them no more
	if _, err := st.s.q.GiveBack(ctx, ret); err != nil && !errors.Is(err, host.ErrLateReturn) {
		st.s.warn("rlqs: giving back unused quota failed; it stays counted until its window ends",
			"domain", st.domain, "bucket", b.id.GetBucket(), "units", n, "err", err)
	}
}

// end gives back, once the stream's assignments have run out, what its
// client did not report using: a client that ends its stream without
// reporting what it granted since its last report has those given back
// too (docs/envoy.md gives the bound).
func (st *streamState) end() {
	var last time.Time
	for _, b := range st.buckets {
		if b.expires.After(last) {
			last = b.expires
		}
	}
	time.AfterFunc(max(time.Until(last), 0), func() {
		now := time.Now()
		for _, b := range st.buckets {
			st.settle(st.s.life, b, now)
		}
	})
}

// settle gives back what b holds: its client's assignments have run out.
func (st *streamState) settle(ctx context.Context, b *bucket, now time.Time) {
	for _, t := range b.takes {
		if now.Before(t.deadline) {
			st.giveBack(ctx, b, t, t.unused())
		}
	}
}

// bucketKey is a bucket id as a map key, its entries sorted, or why it is
// refused.
func bucketKey(id *rlqsv3.BucketId) (string, error) {
	m := id.GetBucket()
	switch {
	case len(m) == 0:
		return "", errors.New("bucket_id: empty")
	case len(m) > MaxBucketAttrs:
		return "", fmt.Errorf("bucket_id: at most %d entries, got %d", MaxBucketAttrs, len(m))
	}
	keys := make([]string, 0, len(m))
	for k, v := range m {
		if len(k) > maxAttrLen || len(v) > maxAttrLen {
			return "", fmt.Errorf("bucket_id: keys and values of at most %d bytes", maxAttrLen)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(m[k])
		sb.WriteByte(0)
	}
	return sb.String(), nil
}
