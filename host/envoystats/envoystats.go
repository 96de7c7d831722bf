// Package envoystats sends envoy ratelimit's stats, under its names, to a
// statsd server over UDP, so that the dashboards and statsd_exporter
// mappings written for envoy ratelimit (Envoy Gateway's among them) read
// ruled's:
//
//	ratelimit.service.rate_limit.KEY.total_hits|over_limit|near_limit|within_limit|shadow_mode|over_limit_with_local_cache
//	ratelimit.service.call.should_rate_limit.redis_error|service_error
//	ratelimit.service.config_load_success|config_load_error
//	ratelimit_server.ShouldRateLimit.total_requests, ratelimit_server.ShouldRateLimit.response_time (ms)
//
// KEY is the rate limit's path in its config (domain.key_value.key), or,
// for a detailed_metric limit and the limit override, the request's
// entries. Counters are summed in process and sent as deltas every flush
// interval; response times are sent as samples, at most maxSamples per
// interval (the rest is accounted for by the sample rate).
package envoystats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
)

// maxPacket is the largest UDP payload sent: one that fits an Ethernet
// frame, as statsd clients use.
const maxPacket = 1432

// maxSamples bounds the response-time samples kept per flush interval.
const maxSamples = 1000

// maxRequestKeys bounds the stats keys made from requests (detailed_metric,
// limit overrides): past it their counts go to the limit's config key, so
// that a client cannot grow the stats without bound.
const maxRequestKeys = 10000

// Options configure a Sink.
type Options struct {
	// Addr is the statsd server, host:port (UDP).
	Addr string
	// Flush is how often counters are sent (default 10 s, envoy
	// ratelimit's STATS_FLUSH_INTERVAL).
	Flush time.Duration
	// NearLimitRatio is the share of a limit past which hits count as
	// near_limit (default 0.8).
	NearLimitRatio float64
	// Logger receives send failures, rate-limited by the caller's handler.
	Logger *slog.Logger
}

// Sink keeps envoy ratelimit's counters and sends them to statsd. Its
// methods are safe for concurrent use.
type Sink struct {
	conn net.Conn
	opts Options
	log  *slog.Logger
	keys atomic.Pointer[map[string]envoyconfig.StatKey]

	limits sync.Map     // stats key → *limitStats
	nReq   atomic.Int64 // keys made from requests in limits
	// The service's counters.
	calls, redisErrors, serviceErrors, loads, loadErrors atomic.Uint64

	seen    atomic.Int64 // response times offered this interval
	mu      sync.Mutex
	samples []float64 // response times kept, in ms
}

// limitStats are the counters of one rate limit's stats key.
type limitStats struct {
	totalHits, withinLimit, nearLimit, overLimit, overLimitCache, shadowMode atomic.Uint64
}

// New returns a sink sending to o.Addr; Run flushes it.
func New(o Options) (*Sink, error) {
	if o.Flush <= 0 {
		o.Flush = 10 * time.Second
	}
	if o.NearLimitRatio <= 0 {
		o.NearLimitRatio = 0.8
	}
	conn, err := net.Dial("udp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("envoystats: statsd at %s: %w", o.Addr, err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sink{conn: conn, opts: o, log: log}
	s.keys.Store(&map[string]envoyconfig.StatKey{})
	return s, nil
}

// SetKeys makes files' stat keys the ones counted under: call it with the
// translation of the configs that are about to serve.
func (s *Sink) SetKeys(files []envoyconfig.File) {
	m := map[string]envoyconfig.StatKey{}
	for _, f := range files {
		for rule, k := range f.Stats {
			m[rule] = k
		}
	}
	s.keys.Store(&m)
}

// ConfigLoad counts a config load: config_load_success, or
// config_load_error when err is not nil.
func (s *Sink) ConfigLoad(err error) {
	if err != nil {
		s.loadErrors.Add(1)
		return
	}
	s.loads.Add(1)
}

// RateLimitCall counts one ShouldRateLimit call (grpcapi.CallObserver):
// its descriptors' results in reqs order, how long it took, and its error.
// A limit's counters are found by its key; only a key made from the
// request (detailed_metric, limit override) is built per call.
func (s *Sink) RateLimitCall(req *rlsv3.RateLimitRequest, results []host.Result, took time.Duration, err error) {
	s.calls.Add(1)
	s.sample(float64(took) / float64(time.Millisecond))
	if err != nil {
		s.serviceErrors.Add(1)
		return
	}
	keys := *s.keys.Load()
	redisError := false
	for i, res := range results {
		d := req.GetDescriptors()[i]
		hits := uint64(req.GetHitsAddend())
		if d.GetHitsAddend() != nil {
			hits = d.GetHitsAddend().GetValue()
		}
		hits = max(hits, 1)
		for j := range res.Results {
			rr := &res.Results[j]
			if rr.Degraded != host.DegradedNone {
				redisError = true
				continue
			}
			k, ok := keys[rr.Rule]
			if !ok || rr.Exempt || rr.Err != nil {
				continue
			}
			s.count(s.limit(req.GetDomain(), d, k), rr, hits)
		}
	}
	if redisError {
		s.redisErrors.Add(1)
	}
}

// limit is the counters a rule's stats go to for descriptor d: its config
// key's, or those of the key made from d's entries, while fewer than
// maxRequestKeys such keys exist.
func (s *Sink) limit(domain string, d *rlcommonv3.RateLimitDescriptor, k envoyconfig.StatKey) *limitStats {
	key := k.Key
	if k.FromRequest {
		var b strings.Builder
		b.WriteString(domain)
		for _, e := range d.GetEntries() {
			b.WriteByte('.')
			b.WriteString(e.GetKey())
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
		key = b.String()
	}
	if ls, ok := s.limits.Load(key); ok {
		return ls.(*limitStats)
	}
	if k.FromRequest && s.nReq.Load() >= maxRequestKeys {
		key = k.Key
	}
	ls, loaded := s.limits.LoadOrStore(key, new(limitStats))
	if !loaded && key != k.Key {
		s.nReq.Add(1)
	}
	return ls.(*limitStats)
}

// count adds one rule's decision of hits to a limit's stats, as envoy
// ratelimit's base limiter does: within_limit and near_limit for an
// admission, over_limit (and near_limit for the hits below the limit) for
// a denial, shadow_mode for a shadow rule's denial.
func (s *Sink) count(ls *limitStats, rr *host.RuleResult, hits uint64) {
	ls.totalHits.Add(hits)
	limit := uint64(max(rr.Limit, 0))
	near := uint64(math.Floor(float64(limit) * s.opts.NearLimitRatio))
	remaining := uint64(max(rr.Remaining, 0))
	if rr.Allowed {
		ls.withinLimit.Add(hits)
		after := limit - min(remaining, limit)
		before := after - min(hits, after)
		if after > near {
			ls.nearLimit.Add(after - max(near, before))
		}
		return
	}
	// A denial consumes nothing: the count before is what the limit left.
	before := limit - min(remaining, limit)
	after := before + hits
	if before >= limit {
		ls.overLimit.Add(hits)
	} else {
		ls.overLimit.Add(after - limit)
		ls.nearLimit.Add(limit - max(near, before))
	}
	if rr.FromDenyCache() {
		ls.overLimitCache.Add(hits)
	}
	if rr.Shadow {
		ls.shadowMode.Add(hits)
	}
}

// clean makes key safe in a statsd line.
func clean(key string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ':', '|', '@', '\n', '\r', ' ':
			return '_'
		}
		return r
	}, key)
}

// sample keeps one response time, reservoir-sampled past maxSamples: past
// the first maxSamples of an interval, the lock is taken only for the
// samples kept, fewer and fewer.
func (s *Sink) sample(ms float64) {
	n := s.seen.Add(1)
	slot := n - 1
	if n > maxSamples {
		if slot = rand.Int64N(n); slot >= maxSamples {
			return
		}
	}
	s.mu.Lock()
	if int(slot) < len(s.samples) {
		s.samples[slot] = ms
	} else {
		s.samples = append(s.samples, ms)
	}
	s.mu.Unlock()
}

// Run flushes every interval until ctx ends, then once more.
func (s *Sink) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Flush()
			return
		case <-t.C:
			s.Flush()
		}
	}
}

// Flush sends the counters' changes since the last flush and the samples
// kept.
func (s *Sink) Flush() {
	var lines []string
	counter := func(name string, c *atomic.Uint64) {
		if n := c.Swap(0); n > 0 {
			lines = append(lines, name+":"+strconv.FormatUint(n, 10)+"|c")
		}
	}
	s.limits.Range(func(k, v any) bool {
		prefix, ls := "ratelimit.service.rate_limit."+clean(k.(string))+".", v.(*limitStats)
		counter(prefix+"total_hits", &ls.totalHits)
		counter(prefix+"within_limit", &ls.withinLimit)
		counter(prefix+"near_limit", &ls.nearLimit)
		counter(prefix+"over_limit", &ls.overLimit)
		counter(prefix+"over_limit_with_local_cache", &ls.overLimitCache)
		counter(prefix+"shadow_mode", &ls.shadowMode)
		return true
	})
	counter("ratelimit_server.ShouldRateLimit.total_requests", &s.calls)
	counter("ratelimit.service.call.should_rate_limit.redis_error", &s.redisErrors)
	counter("ratelimit.service.call.should_rate_limit.service_error", &s.serviceErrors)
	counter("ratelimit.service.config_load_success", &s.loads)
	counter("ratelimit.service.config_load_error", &s.loadErrors)
	s.mu.Lock()
	samples, seen := s.samples, s.seen.Swap(0)
	s.samples = nil
	s.mu.Unlock()
	rate := ""
	if int(seen) > len(samples) {
		rate = "|@" + strconv.FormatFloat(float64(len(samples))/float64(seen), 'f', 6, 64)
	}
	for _, ms := range samples {
		lines = append(lines, "ratelimit_server.ShouldRateLimit.response_time:"+strconv.FormatFloat(ms, 'f', 3, 64)+"|ms"+rate)
	}
	s.send(lines)
}

// send writes lines in packets of at most maxPacket bytes.
func (s *Sink) send(lines []string) {
	var b []byte
	for _, l := range lines {
		if len(b) > 0 && len(b)+1+len(l) > maxPacket {
			s.write(b)
			b = b[:0]
		}
		if len(b) > 0 {
			b = append(b, '\n')
		}
		b = append(b, l...)
	}
	if len(b) > 0 {
		s.write(b)
	}
}

func (s *Sink) write(b []byte) {
	if _, err := s.conn.Write(b); err != nil {
		s.log.Warn("statsd send failed", "addr", s.opts.Addr, "err", err)
	}
}

// Close flushes and closes the connection.
func (s *Sink) Close() error {
	s.Flush()
	return s.conn.Close()
}
