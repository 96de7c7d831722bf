package envoystats_test

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/envoystats"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/sdk"
)

// listen is a statsd server on loopback: it returns its address and a
// function that reads the counters sent until a flush's packets stop.
func listen(t *testing.T) (string, func() map[string]uint64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	return pc.LocalAddr().String(), func() map[string]uint64 {
		got := map[string]uint64{}
		buf := make([]byte, 65536)
		for {
			_ = pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return got
			}
			if n > 1432 {
				t.Errorf("a packet of %d bytes", n)
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				name, rest, _ := strings.Cut(line, ":")
				v, typ, _ := strings.Cut(rest, "|")
				if typ != "c" {
					continue
				}
				c, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					t.Fatalf("line %q", line)
				}
				got[name] += c
			}
		}
	}
}

func call(domain string, entries ...string) *rlsv3.RateLimitRequest {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i < len(entries); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{d}}
}

// TestCountsAsEnvoyRatelimit: twelve single hits on a limit of 10 (near
// limit at 8) count as envoy ratelimit's base limiter counts them: 12
// total, 10 within, 2 near (the 9th and 10th), 2 over; a detailed_metric
// limit counts under the request's entries; a shadow denial counts in
// shadow_mode; a failed call counts a service error.
func TestCountsAsEnvoyRatelimit(t *testing.T) {
	addr, read := listen(t)
	s, err := envoystats.New(envoystats.Options{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	s.SetKeys([]envoyconfig.File{{Stats: map[string]envoyconfig.StatKey{
		"edge-user":   {Key: "edge.user"},
		"edge-tenant": {Key: "edge.tenant", FromRequest: true},
		"edge-shadow": {Key: "edge.shadow_on"},
	}}})
	for i := 1; i <= 12; i++ {
		rr := host.RuleResult{Rule: "edge-user", Decision: sdk.Decision{Allowed: i <= 10, Limit: 10, Remaining: int64(max(10-i, 0))}}
		s.RateLimitCall(call("edge", "user", "alice"), []host.Result{{Results: []host.RuleResult{rr}}}, time.Millisecond, nil)
	}
	s.RateLimitCall(call("edge", "tenant", "t1"), []host.Result{{Results: []host.RuleResult{
		{Rule: "edge-tenant", Decision: sdk.Decision{Allowed: true, Limit: 100, Remaining: 99}}}}}, time.Millisecond, nil)
	s.RateLimitCall(call("edge", "shadow", "on"), []host.Result{{Results: []host.RuleResult{
		{Rule: "edge-shadow", Shadow: true, Decision: sdk.Decision{Allowed: false, Limit: 1, Remaining: 0}}}}}, time.Millisecond, nil)
	s.RateLimitCall(call("edge"), nil, time.Millisecond, errors.New("bad request"))
	s.Flush()
	got := read()
	want := map[string]uint64{
		"ratelimit.service.rate_limit.edge.user.total_hits":        12,
		"ratelimit.service.rate_limit.edge.user.within_limit":      10,
		"ratelimit.service.rate_limit.edge.user.near_limit":        2,
		"ratelimit.service.rate_limit.edge.user.over_limit":        2,
		"ratelimit.service.rate_limit.edge.tenant_t1.total_hits":   1,
		"ratelimit.service.rate_limit.edge.tenant_t1.within_limit": 1,
		"ratelimit.service.rate_limit.edge.shadow_on.total_hits":   1,
		"ratelimit.service.rate_limit.edge.shadow_on.over_limit":   1,
		"ratelimit.service.rate_limit.edge.shadow_on.shadow_mode":  1,
		"ratelimit.service.call.should_rate_limit.service_error":   1,
		"ratelimit_server.ShouldRateLimit.total_requests":          15,
	}
	for name, n := range want {
		if got[name] != n {
			t.Errorf("%s = %d, want %d", name, got[name], n)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unexpected stat %s = %d", name, got[name])
		}
	}
	// A flush sends only what changed since the last.
	s.Flush()
	if again := read(); len(again) != 0 {
		t.Errorf("a second flush sent %v", again)
	}
}
