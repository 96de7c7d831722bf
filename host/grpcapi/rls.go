// Package grpcapi is ruled's gRPC interface: Envoy's rate limit service
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), so that
// Envoy's ratelimit filter can ask ruled directly, and the standard gRPC
// health service. Like httpapi, it knows the engine's types and nothing
// about rules, plugins or Redis.
//
// # Mapping
//
// Each descriptor of a RateLimitRequest is one check through the Checker:
//
//   - attrs: every entry as attrs[entry.key] = entry.value (a later entry
//     with the same key wins), then attrs["domain"] = the request's domain,
//     which an entry cannot override;
//   - request.ip: the value of a "remote_address" entry (what Envoy's
//     remote_address action sends), so that rules written for HTTP checks
//     keyed on request.ip work unchanged;
//   - hits: the descriptor's hits_addend if set, else the request's; 0
//     means 1, as in Envoy; is_negative_hits refunds instead.
//
// Descriptors are decided in order. Once one is over the limit, the units
// the descriptors before it consumed are refunded and the ones after it are
// only peeked at (hits 0), so that a denied request uses up no quota, as
// with the rules of one check. A descriptor no rule matches is OK with no
// current_limit. A decision made by an on_error: deny policy is OVER_LIMIT.
//
// Each status reports the most restrictive rule of its check: current_limit
// {name: the rule, requests_per_unit: its limit, unit and unit_multiplier:
// its window}, limit_remaining and duration_until_reset. The unit is the
// largest of SECOND, MINUTE, HOUR, DAY and WEEK that divides the window
// exactly, and unit_multiplier the number of those units (set when over
// 1): a 10s window is 10 × SECOND, 1m is MINUTE, 90s is 90 × SECOND. A
// window that is not a whole number of seconds is rounded up to one. The
// answer also carries RateLimit, RateLimit-Policy and, when over the limit,
// Retry-After in response_headers_to_add, as the HTTP API sends them.
package grpcapi

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/httpapi"
)

// MaxDescriptors bounds the descriptors of one ShouldRateLimit call.
const MaxDescriptors = 1000

// MaxHits bounds a descriptor's hits, as for the HTTP API.
const MaxHits = httpapi.MaxHits

// RemoteAddressKey is the descriptor entry whose value becomes request.ip.
const RemoteAddressKey = "remote_address"

// DomainAttr is the attrs key that holds the request's domain.
const DomainAttr = "domain"

// Checker decides requests; *host.Engine implements it.
type Checker interface {
	Check(ctx context.Context, req *host.CheckRequest) host.Result
}

// NewServer returns a gRPC server with the rate limit service and the
// standard health service (reporting SERVING) registered. opts are passed
// to grpc.NewServer.
func NewServer(c Checker, log *slog.Logger, opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(opts...)
	Register(s, c, log)
	healthpb.RegisterHealthServer(s, health.NewServer())
	return s
}

// Register adds the rate limit service to s.
func Register(s grpc.ServiceRegistrar, c Checker, log *slog.Logger) {
	rlsv3.RegisterRateLimitServiceServer(s, NewRateLimitService(c, log))
}

// RateLimitService implements Envoy's RateLimitService on a Checker.
type RateLimitService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	check Checker
	log   *slog.Logger
}

// NewRateLimitService returns the service, for callers that register it
// themselves.
func NewRateLimitService(c Checker, log *slog.Logger) *RateLimitService {
	if log == nil {
		log = slog.Default()
	}
	return &RateLimitService{check: c, log: log}
}

// ShouldRateLimit decides every descriptor of the request.
func (s *RateLimitService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	reqs, err := checkRequests(req)
	if err != nil {
		s.log.Debug("invalid rate limit request", "domain", req.GetDomain(), "err", err)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	resp := &rlsv3.RateLimitResponse{
		OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses:    make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(reqs)),
	}
	// One bound for the whole request: its descriptors' checks and refunds
	// share the engine's decision time-out.
	ctx, cancel := host.ShareDecisionTimeout(ctx, s.check)
	defer cancel()
	all := host.Result{Allowed: true}
	results := make([]host.Result, len(reqs))
	over := false
	for i, cr := range reqs {
		if over {
			cr.Hits = 0 // report the state, consume nothing
		}
		results[i] = s.check.Check(ctx, cr)
		res := &results[i]
		if res.BadRequest != nil {
			if !over {
				s.refund(ctx, reqs[:i], results[:i])
			}
			return nil, status.Error(codes.InvalidArgument, res.BadRequest.Error())
		}
		resp.Statuses[i] = descriptorStatus(res)
		all.Results = append(all.Results, res.Results...)
		if res.Allowed {
			continue
		}
		all.Allowed = false
		all.RetryAfter = max(all.RetryAfter, res.RetryAfter)
		if !over {
			over = true
			s.refund(ctx, reqs[:i], results[:i])
		}
	}
	if over {
		resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	resp.ResponseHeadersToAdd = headersToAdd(&all)
	return resp, nil
}

// refund gives back the units that descriptors allowed before one was over
// the limit consumed. Only checks in which a plugin granted units are
// refunded; a refund that fails is logged and otherwise ignored (the units
// expire with their window), as in the engine.
func (s *RateLimitService) refund(ctx context.Context, done []*host.CheckRequest, results []host.Result) {
	for i, cr := range done {
		if cr.Hits <= 0 || !granted(&results[i]) {
			continue
		}
		back := *cr
		back.Hits = -cr.Hits
		res := s.check.Check(ctx, &back)
		for _, rr := range res.Results {
			if rr.Err != nil {
				s.log.Warn("refund failed", "rule", rr.Rule, "subject", rr.Subject, "err", rr.Err)
			}
		}
	}
}

// granted reports whether a plugin granted units in a check.
func granted(res *host.Result) bool {
	for _, rr := range res.Results {
		if rr.Degraded == host.DegradedNone && rr.Granted > 0 {
			return true
		}
	}
	return false
}

// checkRequests maps each descriptor to a check (see the package comment).
func checkRequests(req *rlsv3.RateLimitRequest) ([]*host.CheckRequest, error) {
	ds := req.GetDescriptors()
	if len(ds) > MaxDescriptors {
		return nil, fmt.Errorf("descriptors: at most %d per call, got %d", MaxDescriptors, len(ds))
	}
	out := make([]*host.CheckRequest, len(ds))
	for i, d := range ds {
		hits, err := descriptorHits(req, d)
		if err != nil {
			return nil, fmt.Errorf("descriptors[%d]: %w", i, err)
		}
		cr := &host.CheckRequest{Attrs: make(map[string]string, len(d.GetEntries())+1), Hits: hits}
		for _, e := range d.GetEntries() {
			cr.Attrs[e.GetKey()] = e.GetValue()
			if e.GetKey() == RemoteAddressKey {
				cr.Request.IP = e.GetValue()
			}
		}
		cr.Attrs[DomainAttr] = req.GetDomain()
		out[i] = cr
	}
	return out, nil
}

func descriptorHits(req *rlsv3.RateLimitRequest, d *rlcommonv3.RateLimitDescriptor) (int64, error) {
	hits := uint64(req.GetHitsAddend())
	if d.GetHitsAddend() != nil {
		hits = d.GetHitsAddend().GetValue()
	}
	if hits == 0 {
		hits = 1
	}
	if hits > MaxHits {
		return 0, fmt.Errorf("hits_addend: at most %d, got %d", MaxHits, hits)
	}
	if d.GetIsNegativeHits() {
		return -int64(hits), nil
	}
	return int64(hits), nil
}

// descriptorStatus reports one check's decision and its most restrictive
// rule: what is left of its quota and when it resets or, on a denial, none
// left until its retry-after.
func descriptorStatus(res *host.Result) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !res.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	p, ok := res.Policy()
	if !ok {
		return st
	}
	st.CurrentLimit = RateLimitOf(p.Rule, p.Limit, p.Window)
	if p.Allowed {
		st.LimitRemaining = clampUint32(p.Remaining)
		st.DurationUntilReset = durationpb.New(p.Reset)
		return st
	}
	// A denial has no quota left whatever the plugin counts (a sortedset
	// min_gap denies with its rates' quota unspent), and its window ends
	// when a retry may pass: the same numbers as the RateLimit header.
	st.DurationUntilReset = durationpb.New(p.RetryAfter)
	return st
}

// units are the Envoy units a window is expressed in, largest first. MONTH
// and YEAR have no fixed length and are not used.
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	d    time.Duration
}{
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
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: name, RequestsPerUnit: clampUint32(limit)}
	if window <= 0 {
		return rl
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
	return rl
}

// headersToAdd is the RateLimit headers of the combined decision, for
// response_headers_to_add.
func headersToAdd(all *host.Result) []*corev3.HeaderValue {
	h := http.Header{}
	httpapi.SetRateLimitHeaders(h, all)
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
