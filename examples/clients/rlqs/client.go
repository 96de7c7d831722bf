// Package rlqs is a client of Envoy's rate limit quota service (RLQS) that
// behaves as Envoy's rate_limit_quota filter does, for tests, load
// harnesses, and Go services that want the same local decisions:
//
//   - a request of a bucket seen for the first time is decided by the
//     no-assignment behaviour (allow, unless Options.DenyWithoutAssignment)
//     and reported at once, alone;
//   - every ReportInterval (Envoy's is 5 s) one report carries every
//     bucket, those without traffic too, with the requests allowed and
//     denied since the last one and the whole seconds elapsed;
//   - an assignment applies until its time to live runs out, then the
//     no-assignment behaviour again: ALLOW_ALL and DENY_ALL as they say, a
//     token bucket that starts full and refills continuously, kept with its
//     tokens when a new assignment repeats it, and rescaled (tokens in
//     proportion to the new capacity) when it changes it;
//   - an abandon action forgets the bucket;
//   - a stream that fails is opened again at the next report, the buckets
//     and their assignments kept.
//
// Envoy's filter source (source/extensions/filters/http/rate_limit_quota/)
// is the reference; docs/envoy.md ("Rate limit quota") lists what ruled's
// server relies on.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Options configure a Client.
type Options struct {
	// Domain names the client's domain on its stream (required).
	Domain string
	// ReportInterval is how often the client reports (5 s when 0, as
	// Envoy's filter does whatever its config says).
	ReportInterval time.Duration
	// DenyWithoutAssignment is the no-assignment behaviour DENY_ALL: deny
	// a bucket's requests while it has no assignment (Envoy's
	// no_assignment_behavior; ALLOW_ALL when unset).
	DenyWithoutAssignment bool
}

// Client decides requests locally on the quota an RLQS server assigns.
type Client struct {
	rls    rlqsv3.RateLimitQuotaServiceClient
	opts   Options
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	buckets map[string]*bucket
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient // nil when none is open
	sendMu  sync.Mutex                                               // one Send at a time
	stats   Stats
}

// Stats counts what a client decided and received.
type Stats struct {
	Allowed, Denied int64
	// Unassigned counts the requests allowed while their bucket had no
	// assignment (its first, or after one ran out).
	Unassigned  int64
	Assignments int64
	// Reports counts the reports sent.
	Reports int64
}

// bucket is one bucket's assignment and usage since the last report.
type bucket struct {
	id              map[string]string
	action          action
	expires         time.Time // zero without an assignment
	allowed, denied uint64
	reported        time.Time
}

// action is an assignment: a blanket rule or a token bucket.
type action struct {
	kind                kind
	max, perFill, fillS int64 // the token bucket's capacity, refill and interval in whole seconds
	tokens              float64
	filled              time.Time
}

type kind int

const (
	noAssignment kind = iota
	allowAll
	denyAll
	tokenBucket
)

// New returns a client of the RLQS server on conn; it opens its stream with
// its first bucket. Close ends it.
func New(conn grpc.ClientConnInterface, opts Options) (*Client, error) {
	if opts.Domain == "" {
		return nil, errors.New("rlqs: a client needs a domain")
	}
	if opts.ReportInterval <= 0 {
		opts.ReportInterval = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{rls: rlqsv3.NewRateLimitQuotaServiceClient(conn), opts: opts, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), buckets: map[string]*bucket{}}
	go c.reportEvery()
	return c, nil
}

// Allow decides one request of the bucket id.
func (c *Client) Allow(id map[string]string) bool {
	key := bucketKey(id)
	now := time.Now()
	c.mu.Lock()
	b, ok := c.buckets[key]
	if !ok {
		b = &bucket{id: maps.Clone(id), reported: now}
		c.buckets[key] = b
	}
	allow, assigned := b.decide(now, c.opts.DenyWithoutAssignment)
	switch {
	case !allow:
		b.denied++
		c.stats.Denied++
	case !assigned:
		c.stats.Unassigned++
		fallthrough
	default:
		b.allowed++
		c.stats.Allowed++
	}
	var first *rlqsv3.RateLimitQuotaUsageReports
	if !ok {
		first = c.reportLocked([]*bucket{b}, now)
	}
	c.mu.Unlock()
	if first != nil {
		c.send(first)
	}
	return allow
}

// decide applies b's assignment to one request at now, and says whether
// there was one.
func (b *bucket) decide(now time.Time, denyWithout bool) (allow, assigned bool) {
	if !b.expires.IsZero() && !now.Before(b.expires) {
		b.action, b.expires = action{}, time.Time{} // expired: no assignment again
	}
	switch b.action.kind {
	case allowAll:
		return true, true
	case denyAll:
		return false, true
	case tokenBucket:
		a := &b.action
		a.refill(now)
		if a.tokens < 1 {
			return false, true
		}
		a.tokens--
		return true, true
	}
	return !denyWithout, false
}

// refill adds the tokens a continuous refill gives since the last one.
func (a *action) refill(now time.Time) {
	if a.fillS > 0 {
		a.tokens = math.Min(float64(a.max), a.tokens+float64(a.perFill)/float64(a.fillS)*now.Sub(a.filled).Seconds())
	}
	a.filled = now
}

// Stats returns what the client decided and received so far.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Assignment describes the assignment the bucket id has now: "none"
// (none yet, or run out), "allow_all", "deny_all", or "token_bucket
// max=N rate=N/Ns".
func (c *Client) Assignment(id map[string]string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.buckets[bucketKey(id)]
	if !ok || b.expires.IsZero() || !time.Now().Before(b.expires) {
		return "none"
	}
	switch a := b.action; a.kind {
	case allowAll:
		return "allow_all"
	case denyAll:
		return "deny_all"
	case tokenBucket:
		return fmt.Sprintf("token_bucket max=%d rate=%d/%ds", a.max, a.perFill, a.fillS)
	}
	return "none"
}

// Close ends the stream without a last report, as Envoy's filter does.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	return nil
}

// reportEvery reports every bucket every ReportInterval, opening the
// stream again when it has failed.
func (c *Client) reportEvery() {
	defer close(c.done)
	t := time.NewTicker(c.opts.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		c.mu.Lock()
		var r *rlqsv3.RateLimitQuotaUsageReports
		if len(c.buckets) > 0 {
			r = c.reportLocked(slices.Collect(maps.Values(c.buckets)), now)
		}
		c.mu.Unlock()
		if r != nil {
			c.send(r)
		}
	}
}

// reportLocked is the report of bs at now, their counts reset.
func (c *Client) reportLocked(bs []*bucket, now time.Time) *rlqsv3.RateLimitQuotaUsageReports {
	r := &rlqsv3.RateLimitQuotaUsageReports{Domain: c.opts.Domain}
	for _, b := range bs {
		r.BucketQuotaUsages = append(r.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.reported) / time.Second)},
			NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied})
		b.allowed, b.denied, b.reported = 0, 0, now
	}
	return r
}

// send sends r on the stream, opening it first if none is open; a report
// that cannot be sent is lost, as Envoy's are.
func (c *Client) send(r *rlqsv3.RateLimitQuotaUsageReports) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	c.mu.Lock()
	s := c.stream
	c.mu.Unlock()
	if s == nil {
		var err error
		if s, err = c.rls.StreamRateLimitQuotas(c.ctx); err != nil {
			return
		}
		c.mu.Lock()
		c.stream = s
		c.mu.Unlock()
		go c.receive(s)
	}
	if err := s.Send(r); err != nil {
		c.dropStream(s)
		return
	}
	c.mu.Lock()
	c.stats.Reports++
	c.mu.Unlock()
}

// receive applies the actions the server sends on s until it fails.
func (c *Client) receive(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	for {
		resp, err := s.Recv()
		if err != nil {
			c.dropStream(s)
			return
		}
		now := time.Now()
		c.mu.Lock()
		for _, a := range resp.GetBucketAction() {
			c.applyLocked(a, now)
		}
		c.mu.Unlock()
	}
}

// dropStream forgets s, if it is the open stream; the next report opens
// another.
func (c *Client) dropStream(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == s {
		c.stream = nil
	}
}

// applyLocked applies one action at now.
func (c *Client) applyLocked(a *rlqsv3.RateLimitQuotaResponse_BucketAction, now time.Time) {
	key := bucketKey(a.GetBucketId().GetBucket())
	b, ok := c.buckets[key]
	if !ok {
		return // Envoy ignores actions for buckets it has not reported
	}
	if a.GetAbandonAction() != nil {
		delete(c.buckets, key)
		return
	}
	qa := a.GetQuotaAssignmentAction()
	st := qa.GetRateLimitStrategy()
	if qa == nil || st == nil {
		return
	}
	var next action
	switch x := st.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := x.TokenBucket
		perFill := int64(1)
		if tb.GetTokensPerFill() != nil {
			perFill = int64(tb.GetTokensPerFill().GetValue())
		}
		next = action{kind: tokenBucket, max: int64(tb.GetMaxTokens()), perFill: perFill,
			fillS: tb.GetFillInterval().GetSeconds(), filled: now, tokens: float64(tb.GetMaxTokens())}
		if old := &b.action; old.kind == tokenBucket {
			old.refill(now)
			if old.max == next.max && old.perFill == next.perFill && old.fillS == next.fillS {
				next = *old // the same bucket: its tokens kept
			} else if old.max > 0 {
				next.tokens = float64(next.max) * old.tokens / float64(old.max)
			}
		}
	case *typev3.RateLimitStrategy_BlanketRule_:
		next = action{kind: allowAll}
		if x.BlanketRule == typev3.RateLimitStrategy_DENY_ALL {
			next = action{kind: denyAll}
		}
	default:
		return // unset, or requests_per_time_unit: Envoy skips the action
	}
	b.action = next
	// Envoy counts whole seconds; none is no assignment left.
	b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	c.stats.Assignments++
}

// bucketKey is a bucket id as a map key.
func bucketKey(id map[string]string) string {
	keys := slices.Sorted(maps.Keys(id))
	var sb strings.Builder
	for _, k := range keys {
		sb.WriteString(k)
		sb.WriteByte(0)
		sb.WriteString(id[k])
		sb.WriteByte(0)
	}
	return sb.String()
}
