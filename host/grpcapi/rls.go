// Package grpcapi is ruled's gRPC interface: Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), so that
// Envoy's ratelimit filter can ask ruled directly, and the standard gRPC
// health service, which follows the daemon's readiness (Health). Like httpapi, it knows the engine's types and nothing
// about rules, plugins or Redis.
//
// # Mapping
//
// Each descriptor of a RateLimitRequest is one check, and the descriptors
// of one request are decided together (host.Engine.CheckEach):
//
//   - attrs: every entry as attrs[entry.key] = entry.value (a later entry
//     with the same key wins), then the reserved keys: attrs["domain"],
//     attrs["descriptor_keys"] (the entry keys in order, joined with ","),
//     and, only for a descriptor with a limit override,
//     attrs["limit_override"] and attrs["limit_override_window"];
//   - request.ip: the value of a "remote_address" entry (what Envoy's
//     remote_address action sends), so that rules written for HTTP checks
//     keyed on request.ip work unchanged;
//   - hits: the descriptor's hits_addend if set (0 only checks), else the
//     request's, where 0 means 1, as in envoy ratelimit; is_negative_hits
//     refunds instead.
//
// Descriptors are decided in order. Once one is over the limit, the units
// the descriptors before it consumed are refunded (their statuses report
// the remaining after it) and the ones after it are only peeked at, so
// that a denied request uses up no quota, as with the rules of one check.
// A descriptor no rule matched is OK with no current_limit; one an exempt
// rule admitted is OK with the most that can remain. A decision made by
// an on_error: deny policy is OVER_LIMIT. An empty domain or descriptor
// list is INVALID_ARGUMENT.
//
// Each status reports the most restrictive enforcing rule of its check or,
// when only shadow rules report a limit, the most restrictive of those (a
// shadow rule over its limit reports OK with nothing remaining, as envoy
// ratelimit's shadow_mode): current_limit {name: the rule,
// requests_per_unit: its limit, unit and unit_multiplier: its window},
// limit_remaining (0 when over) and duration_until_reset. The unit is the
// largest of SECOND, MINUTE, HOUR, DAY, WEEK, MONTH (30 days) and YEAR (365
// days) that divides the window exactly, and unit_multiplier the number of
// those units (set when over 1): a 10s window is 10 × SECOND, 1m is MINUTE,
// 90s is 90 × SECOND. A window that is not a whole number of seconds is
// rounded up to one. The answer also carries RateLimit, RateLimit-Policy
// and, when over the limit, Retry-After in response_headers_to_add, as the
// HTTP API sends them, for the rule each status reports.
package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/ratelimitheader"
)

// MaxDescriptors bounds the descriptors of one ShouldRateLimit call.
const MaxDescriptors = 1000

// RemoteAddressKey is the descriptor entry whose value becomes request.ip.
const RemoteAddressKey = "remote_address"

// LeaseIDKey is the descriptor entry whose value becomes the check's
// lease id, the name of its in-flight slots (Envoy sets it from
// x-request-id with a request_headers action). It is not an attr and not
// one of the descriptor's keys: rules match the descriptor without it.
const LeaseIDKey = "lease_id"

// DomainAttr is the attrs key that holds the request's domain.
const DomainAttr = "domain"

// KeysAttr is the attrs key that holds a descriptor's entry keys, in
// order, joined with ",": the order and depth of the descriptor, which
// attrs alone do not keep.
const KeysAttr = "descriptor_keys"

// LimitOverrideAttr and LimitOverrideWindowAttr are the attrs keys that
// hold a descriptor's limit override (Envoy's per-descriptor limit, set
// from dynamic metadata): its requests_per_unit, and its unit times
// unit_multiplier as a Go duration ("1m0s"). They are set only when the
// descriptor carries an override; a rule uses them only if its config
// says so (docs/http.md).
const (
	LimitOverrideAttr       = "limit_override"
	LimitOverrideWindowAttr = "limit_override_window"
)

// Checker decides the descriptors of a request; *host.Engine implements
// it (host.Engine.CheckEach).
type Checker interface {
	CheckEach(ctx context.Context, reqs []*host.CheckRequest) []host.Result
}

// NewServer returns a gRPC server with the rate limit service and the
// health service h registered; o tunes the rate limit service. opts are
// passed to grpc.NewServer.
func NewServer(c Checker, h *Health, log *slog.Logger, o ServiceOptions, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append(ServerOptions(), opts...)...)
	rlsv3.RegisterRateLimitServiceServer(s, NewRateLimitService(c, log, o))
	if o.Holds != nil {
		alsv3.RegisterAccessLogServiceServer(s, NewAccessLogService(*o.Holds, log))
	}
	healthpb.RegisterHealthServer(s, h)
	return s
}

// ServerOptions are the transport options NewServer starts from. Calls run
// on a pool of goroutines whose stacks have grown to the decision path's
// depth, instead of a new goroutine each that grows its stack anew (a
// seventh of the CPU of a call, measured); past the pool, gRPC starts
// goroutines as before.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.NumStreamWorkers(uint32(StreamWorkersPerCPU * runtime.GOMAXPROCS(0)))}
}

// StreamWorkersPerCPU sizes the pool of goroutines that serve calls: one
// per call in flight up to that many per CPU, at which Redis round trips
// keep a CPU busy.
const StreamWorkersPerCPU = 64

// ServiceOptions tune the rate limit service.
type ServiceOptions struct {
	// RefuseRefunds refuses descriptors with is_negative_hits
	// (PermissionDenied): gRPC has no admin token, so serve
	// --client-refunds=admin or deny sets it.
	RefuseRefunds bool
	// OmitHeaders leaves the RateLimit headers out of the answers
	// (response_headers_to_add), as envoy ratelimit does unless
	// LIMIT_RESPONSE_HEADERS_ENABLED.
	OmitHeaders bool
	// Observer, when set, is told of every call.
	Observer CallObserver
	// Holds, when set, puts a release token in the answers that hold
	// in-flight slots, and NewServer serves Envoy's access log service,
	// which releases them when Envoy logs their requests (release.go).
	Holds *Holds
}

// CallObserver is told of every ShouldRateLimit call: the request, each
// descriptor's result (nil when the call failed), how long it took and its
// error. It runs on the call's path: it must be cheap and safe for
// concurrent use.
type CallObserver interface {
	RateLimitCall(req *rlsv3.RateLimitRequest, results []host.Result, took time.Duration, err error)
}

// RateLimitService implements Envoy's RateLimitService on a Checker.
type RateLimitService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	check         Checker
	log           *slog.Logger
	refuseRefunds bool
	omitHeaders   bool
	observer      CallObserver
	holds         *Holds
}

// NewRateLimitService returns the service, tuned by o, for callers that
// register it themselves.
func NewRateLimitService(c Checker, log *slog.Logger, o ServiceOptions) *RateLimitService {
	if log == nil {
		log = slog.Default()
	}
	return &RateLimitService{check: c, log: log, refuseRefunds: o.RefuseRefunds, omitHeaders: o.OmitHeaders, observer: o.Observer, holds: o.Holds}
}

// ShouldRateLimit decides every descriptor of the request.
func (s *RateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if s.observer == nil {
		resp, _, err := s.shouldRateLimit(ctx, req)
		return resp, err
	}
	start := time.Now()
	resp, results, err := s.shouldRateLimit(ctx, req)
	s.observer.RateLimitCall(req, results, time.Since(start), err)
	return resp, err
}

// shouldRateLimit is ShouldRateLimit, returning the descriptors' results
// too.
func (s *RateLimitService) shouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, []host.Result, error) {
	reqs, err := checkRequests(req)
	if err != nil {
		s.log.Debug("invalid rate limit request", "domain", req.GetDomain(), "err", err)
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if s.refuseRefunds {
		for i, r := range reqs {
			if r.Hits < 0 {
				return nil, nil, status.Errorf(codes.PermissionDenied, "descriptors[%d]: refunds (is_negative_hits) are refused (--client-refunds)", i)
			}
		}
	}
	results := s.check.CheckEach(ctx, reqs)
	resp := newResponse(len(reqs))
	all := host.Result{Allowed: true}
	for i := range results {
		res := &results[i]
		if res.BadRequest != nil {
			return nil, nil, status.Error(codes.InvalidArgument, fmt.Sprintf("descriptors[%d]: %v", i, res.BadRequest))
		}
		p, ok := reported(res)
		resp.status(i, res, p, ok)
		if ok && !s.omitHeaders { // all is only for the headers
			all.Results = append(all.Results, p)
		}
		if !res.Allowed {
			all.Allowed = false
			all.RetryAfter = max(all.RetryAfter, res.RetryAfter)
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if !s.omitHeaders {
		resp.ResponseHeadersToAdd = headersToAdd(&all)
	}
	if s.holds != nil {
		// Without a token the slots come back when their leases expire.
		if tok, err := releaseTokenFor(ctx, s.holds.Signer, req, results); err != nil {
			s.log.Warn("in-flight slots held without a release token", "domain", req.GetDomain(), "err", err)
		} else if tok != "" {
			resp.DynamicMetadata = releaseMetadata(tok)
		}
	}
	return resp.RateLimitResponse, results, nil
}

// response is a call's response and, in the same allocation, each
// descriptor's status with its limit and reset: one allocation for the
// usual call of one descriptor instead of five.
type response struct {
	*rlsv3.RateLimitResponse
	parts []statusParts
}

// statusParts is one descriptor's status and the messages it points to.
type statusParts struct {
	status rlsv3.RateLimitResponse_DescriptorStatus
	limit  rlsv3.RateLimitResponse_RateLimit
	reset  durationpb.Duration
}

// oneResponse is a response of one descriptor.
type oneResponse struct {
	resp     rlsv3.RateLimitResponse
	statuses [1]*rlsv3.RateLimitResponse_DescriptorStatus
	parts    [1]statusParts
}

// newResponse returns an OK response with room for n statuses.
func newResponse(n int) response {
	if n == 1 {
		one := new(oneResponse)
		one.resp.OverallCode, one.resp.Statuses = rlsv3.RateLimitResponse_OK, one.statuses[:]
		return response{&one.resp, one.parts[:]}
	}
	return response{&rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)}, make([]statusParts, n)}
}

// status sets the status of descriptor i (descriptorStatus).
func (r response) status(i int, res *host.Result, p host.RuleResult, ok bool) {
	parts := &r.parts[i]
	descriptorStatus(&parts.status, &parts.limit, &parts.reset, res, p, ok)
	r.Statuses[i] = &parts.status
}

// checkRequests maps each descriptor to a check (see the package comment).
func checkRequests(req *rlsv3.RateLimitRequest) ([]*host.CheckRequest, error) {
	if req.GetDomain() == "" {
		return nil, errors.New("rate limit domain must not be empty")
	}
	ds := req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return nil, errors.New("rate limit descriptor list must not be empty")
	case len(ds) > MaxDescriptors:
		return nil, fmt.Errorf("descriptors: at most %d per call, got %d", MaxDescriptors, len(ds))
	}
	var out []*host.CheckRequest
	var each []host.CheckRequest
	if len(ds) == 1 {
		one := new(oneCheck)
		out, each = one.reqs[:], one.req[:]
	} else {
		out, each = make([]*host.CheckRequest, len(ds)), make([]host.CheckRequest, len(ds))
	}
	for i, d := range ds {
		hits, err := descriptorHits(req, d)
		if err != nil {
			return nil, fmt.Errorf("descriptors[%d]: %w", i, err)
		}
		cr := &each[i]
		cr.Hits = hits
		if err := describe(cr, req.GetDomain(), d); err != nil {
			return nil, fmt.Errorf("descriptors[%d]: %w", i, err)
		}
		out[i] = cr
	}
	return out, nil
}

// describe fills cr's request from descriptor d of domain: its entries
// become attrs (remote_address also request.ip; lease_id the lease id, and
// neither an attr nor a key), with the domain, the entry keys and the
// limit override.
func describe(cr *host.CheckRequest, domain string, d *rlcommonv3.RateLimitDescriptor) error {
	cr.Attrs = make(map[string]string, len(d.GetEntries())+4)
	for _, e := range d.GetEntries() {
		switch e.GetKey() {
		case LeaseIDKey:
			if err := host.CheckDedupID(e.GetValue()); err != nil {
				return fmt.Errorf("%s: %w", LeaseIDKey, err)
			}
			cr.LeaseID = e.GetValue()
			continue
		case RemoteAddressKey:
			cr.Request.IP = e.GetValue()
		}
		cr.Attrs[e.GetKey()] = e.GetValue()
	}
	cr.Attrs[DomainAttr] = domain
	cr.Attrs[KeysAttr] = entryKeys(d.GetEntries())
	delete(cr.Attrs, LimitOverrideAttr)
	delete(cr.Attrs, LimitOverrideWindowAttr)
	if o := d.GetLimit(); o != nil {
		window, err := overrideWindow(o)
		if err != nil {
			return fmt.Errorf("limit: %w", err)
		}
		cr.Attrs[LimitOverrideAttr] = strconv.FormatUint(uint64(o.GetRequestsPerUnit()), 10)
		cr.Attrs[LimitOverrideWindowAttr] = window.String()
	}
	return nil
}

// oneCheck is the check of a call of one descriptor and the slice that
// passes it, in one allocation.
type oneCheck struct {
	reqs [1]*host.CheckRequest
	req  [1]host.CheckRequest
}

// entryKeys is the keys of entries but lease_id joined with commas,
// without a copy for the common single entry.
func entryKeys(entries []*rlcommonv3.RateLimitDescriptor_Entry) string {
	if len(entries) == 1 && entries[0].GetKey() != LeaseIDKey {
		return entries[0].GetKey()
	}
	var b strings.Builder
	first := true
	for _, e := range entries {
		if e.GetKey() == LeaseIDKey {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		b.WriteString(e.GetKey())
		first = false
	}
	return b.String()
}

// overrideUnits are the lengths of Envoy's RateLimitUnit values, as
// envoyproxy/ratelimit counts them: a month is 30 days, a year 365.
var overrideUnits = map[typev3.RateLimitUnit]time.Duration{
	typev3.RateLimitUnit_SECOND: time.Second,
	typev3.RateLimitUnit_MINUTE: time.Minute,
	typev3.RateLimitUnit_HOUR:   time.Hour,
	typev3.RateLimitUnit_DAY:    24 * time.Hour,
	typev3.RateLimitUnit_MONTH:  30 * 24 * time.Hour,
	typev3.RateLimitUnit_YEAR:   365 * 24 * time.Hour,
}

// overrideWindow is the window of a descriptor's limit override: its unit
// times its unit_multiplier, if set.
func overrideWindow(o *rlcommonv3.RateLimitDescriptor_RateLimitOverride) (time.Duration, error) {
	unit, ok := overrideUnits[o.GetUnit()]
	if !ok {
		return 0, fmt.Errorf("unit: want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR, got %s", o.GetUnit())
	}
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 {
			return 0, errors.New("unit_multiplier: must be at least 1")
		}
		unit *= time.Duration(m.GetValue())
	}
	return unit, nil
}

// descriptorHits is a descriptor's hits: its own hits_addend when set (0
// then only checks), else the request's, where 0 means 1; negative when
// the descriptor refunds.
func descriptorHits(req *rlsv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) (int64, error) {
	hits := max(uint64(req.GetHitsAddend()), 1)
	if d.GetHitsAddend() != nil {
		hits = d.GetHitsAddend().GetValue()
	}
	n := int64(min(hits, host.MaxHits+1)) // past the bound, by how much does not matter
	if d.GetIsNegativeHits() {
		n = -n
	}
	if err := host.CheckHits(n); err != nil {
		return 0, fmt.Errorf("hits_addend: %w", err)
	}
	return n, nil
}

// reported is the rule a descriptor's status reports: the most restrictive
// enforcing rule with a limit or, when only shadow rules report one, the
// most restrictive of those, as envoy ratelimit reports a shadow limit,
// turned into what an allowed request sees (a shadow rule over its limit:
// nothing remaining until its retry-after).
func reported(res *host.Result) (host.RuleResult, bool) {
	if p, ok := res.Policy(); ok {
		return p, true
	}
	p, ok := res.ShadowPolicy()
	if !ok {
		return p, false
	}
	if !p.Allowed {
		p.Allowed, p.Remaining, p.Reset = true, 0, p.RetryAfter
	}
	p.Shadow = false
	return p, true
}

// descriptorStatus reports one check's decision and the rule p it
// reports: what is left of its quota and when it resets or, on a denial,
// none left until its retry-after. A check an exempt rule admitted,
// with no other limit, reports the most that can remain, as envoy
// ratelimit's unlimited descriptors do.
//
// It fills st, which it points at limit and reset where it reports them.
func descriptorStatus(st *rlsv3.RateLimitResponse_DescriptorStatus, limit *rlsv3.RateLimitResponse_RateLimit, reset *durationpb.Duration,
	res *host.Result, p host.RuleResult, ok bool) {
	st.Code = rlsv3.RateLimitResponse_OK
	if !res.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if !ok {
		if res.Allowed && slices.ContainsFunc(res.Results, func(rr host.RuleResult) bool { return rr.Exempt }) {
			st.LimitRemaining = math.MaxUint32
		}
		return
	}
	setRateLimit(limit, p.Rule, p.Limit, p.Window)
	st.CurrentLimit, st.DurationUntilReset = limit, reset
	if p.Allowed && res.Allowed {
		st.LimitRemaining = clampUint32(p.Remaining)
		setDuration(reset, p.Reset)
		return
	}
	// A denial has no quota left whatever the plugin counts (a sortedset
	// min_gap denies with its rates' quota unspent, a request for more
	// hits than remain leaves them), and its window ends when a retry may
	// pass: the same numbers as the RateLimit header.
	setDuration(reset, max(p.RetryAfter, res.RetryAfter))
}

// setDuration sets pd to d, as durationpb.New makes it.
func setDuration(pd *durationpb.Duration, d time.Duration) {
	nanos := d.Nanoseconds()
	pd.Seconds = nanos / 1e9
	pd.Nanos = int32(nanos - pd.Seconds*1e9)
}

// units are the Envoy units a window is expressed in, largest first. MONTH
// and YEAR are 30 and 365 days, as envoy ratelimit counts them (and as an
// imported envoy config's windows are), so that a window written in them
// is reported in them.
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
}

// RateLimitOf expresses a quota of limit units per window as Envoy's
// RateLimit: the largest unit that divides the window exactly, times
// unit_multiplier when that is over 1. A window that is not a whole number
// of seconds is rounded up to one; a zero window has unit UNKNOWN.
func RateLimitOf(name string, limit int64, window time.Duration) *rlsv3.RateLimitResponse_RateLimit {
	rl := new(rlsv3.RateLimitResponse_RateLimit)
	setRateLimit(rl, name, limit, window)
	return rl
}

// setRateLimit sets rl as RateLimitOf makes it.
func setRateLimit(rl *rlsv3.RateLimitResponse_RateLimit, name string, limit int64, window time.Duration) {
	rl.Name, rl.RequestsPerUnit = name, clampUint32(limit)
	if window <= 0 {
		return
	}
	secs := (window + time.Second - 1) / time.Second * time.Second
	for _, u := range units {
		if secs%u.d != 0 {
			continue
		}
		rl.Unit = u.unit
		if n := int64(secs / u.d); n > 1 {
			rl.UnitMultiplier = wrapperspb.UInt32(clampUint32(n))
		}
		break
	}
}

// headersToAdd is the RateLimit headers of the combined decision, for
// response_headers_to_add.
func headersToAdd(all *host.Result) []*corev3.HeaderValue {
	h := http.Header{}
	ratelimitheader.Set(h, all)
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]*corev3.HeaderValue, 0, len(names))
	for _, k := range names {
		out = append(out, &corev3.HeaderValue{Key: strings.ToLower(k), Value: h.Get(k)})
	}
	return out
}

func clampUint32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}
