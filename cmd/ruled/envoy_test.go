package main

import (
	"context"
	"io"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/ruled-dev/ruled/internal/testkit/xdstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// envoyContractRules are written as an envoy ratelimit user would have
// them: a per-user limit, a shadow limit, an unlimited user.
const envoyContractRules = `rules:
  - name: vip
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "user" && attrs["user"] == "vip"
    exempt: true
  - name: per-user
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "user"
    subject: attrs["user"]
    plugin: fixedwindow
    config: {limit: 10, window: 1m}
  - name: trial
    when: attrs["domain"] == "edge" && attrs["descriptor_keys"] == "trial"
    subject: attrs["trial"]
    plugin: fixedwindow
    config: {limit: 1, window: 1m}
    shadow: true
`

// rlsClient is a gRPC client of a daemon's rate limit service.
type rlsClient struct {
	t   *testing.T
	rls rlsv3.RateLimitServiceClient
}

func dialRLS(t *testing.T, addr string) *rlsClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &rlsClient{t: t, rls: rlsv3.NewRateLimitServiceClient(conn)}
}

func (c *rlsClient) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.rls.ShouldRateLimit(ctx, req)
}

func (c *rlsClient) ask(hits uint32, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	c.t.Helper()
	resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds})
	if err != nil {
		c.t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

func entries(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestEnvoyRLSContract plays envoy ratelimit's own scenarios against the
// real binary in its default configuration (managed Redis, ACL isolation)
// with a real gRPC client: the answers envoy ratelimit gives, point by
// point (docs/http.md, "Compared with envoy ratelimit").
func TestEnvoyRLSContract(t *testing.T) {
	addr := freePort(t)
	d := spawnDaemon(t, envoyContractRules, "--grpc-listen", addr)
	d.waitReady(20 * time.Second)
	c := dialRLS(t, addr)

	// A descriptor's own hits_addend 0 only checks.
	peek := entries("user", "ann")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 2 {
		if st := c.ask(1, peek).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.LimitRemaining != 10 {
			t.Fatalf("hits_addend 0: %v, want OK with 10 remaining", st)
		}
	}
	// Over the limit: remaining 0; the allowed descriptor of the denied
	// call reports what it has after its refund.
	c.ask(4, entries("user", "bob"))
	resp := c.ask(7, entries("user", "ann"), entries("user", "bob"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].LimitRemaining != 10 ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[1].LimitRemaining != 0 {
		t.Fatalf("7 hits with 6 left: %v", resp)
	}
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == "ratelimit" && !strings.Contains(h.Value, `"per-user";r=0;`) {
			t.Fatalf("ratelimit header %q, want r=0", h.Value)
		}
	}
	// A shadow limit is reported, and never denies.
	c.ask(1, entries("trial", "t"))
	st := c.ask(1, entries("trial", "t")).Statuses[0]
	if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetName() != "trial" || st.LimitRemaining != 0 {
		t.Fatalf("over a shadow limit: %v, want OK reporting trial with 0 remaining", st)
	}
	// Unlimited.
	if st := c.ask(1, entries("user", "vip")).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("exempt: %v", st)
	}
	// Errors.
	for _, req := range []*rlsv3.RateLimitRequest{{Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("user", "x")}}, {Domain: "edge"}} {
		if _, err := c.call(req); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v: %v, want InvalidArgument", req, err)
		}
	}
}

// envoyREADMEConfigs are envoy ratelimit configs written after the
// examples of its README, one domain a file, as a team moving over keeps
// them in a directory. Windows are a day or more, so that no window ends
// between two calls of the test.
var envoyREADMEConfigs = map[string]string{
	"messaging.yaml": `domain: messaging
descriptors:
  # marketing messages to one number: 5 a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit: {unit: day, requests_per_unit: 5}
  # any message to one number: 100 a day
  - key: to_number
    rate_limit: {unit: day, requests_per_unit: 100}
`,
	"edge.yaml": `domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: remote_address
    value: 50.0.0.6
    rate_limit: {unit: day, requests_per_unit: 0}
`,
	"internal.yaml": `domain: internal
descriptors:
  - key: ldap
    rate_limit: {unlimited: true}
  - key: azure
    rate_limit: {unit: day, requests_per_unit: 2}
    shadow_mode: true
  - key: key1
    rate_limit: {name: key1_limit, unit: day, requests_per_unit: 1}
  - key: key2
    rate_limit:
      unit: day
      requests_per_unit: 10
      replaces: [{name: key1_limit}]
`,
}

// TestImportedEnvoyConfigServes is what a team moving over does: ruled
// import envoy on a config directory, then ruled serve on the result, in
// its default configuration (managed Redis, ACL isolation), asked by a
// real gRPC client. The answers are those envoy ratelimit documents for
// the same configs and calls.
func TestImportedEnvoyConfigServes(t *testing.T) {
	src := t.TempDir()
	for name, text := range envoyREADMEConfigs {
		writeFile(t, src, name, text)
	}
	out := filepath.Join(t.TempDir(), "rules")
	if b, err := exec.Command(buildRuled(t), "import", "envoy", src, "-o", out).CombinedOutput(); err != nil {
		t.Fatalf("ruled import envoy: %v\n%s", err, b)
	}
	if b, err := exec.Command(buildRuled(t), "check", out).CombinedOutput(); err != nil {
		t.Fatalf("ruled check on the imported rules: %v\n%s", err, b)
	}
	addr := freePort(t)
	d := spawnDaemonAt(t, out, "--grpc-listen", addr)
	d.waitReady(20 * time.Second)
	playEnvoyREADME(t, dialRLS(t, addr))
}

// TestEnvoyConfigsOverXDS: the same configs, pushed by an xDS server to
// ruled serve --xds-server, decide the same: one translation.
func TestEnvoyConfigsOverXDS(t *testing.T) {
	cp := xdstest.Start(t, nil)
	var cfgs []*rlsconf.RateLimitConfig
	for name, text := range envoyREADMEConfigs {
		cfg := xdstest.FromYAML(t, []byte(text))
		cfg.Name = name
		cfgs = append(cfgs, cfg)
	}
	addr := freePort(t)
	d := spawnServe(t, "--xds-server", cp.Addr, "--xds-node-id", xdstest.NodeID, "--grpc-listen", addr)
	// Not ready before the first config, and says why.
	waitFor(t, 20*time.Second, "/readyz: no config from the xds server", func() bool {
		resp, err := http.Get(d.base + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "no config loaded from "+cp.Addr)
	})
	cp.Push(t, "1", cfgs...)
	d.waitReady(20 * time.Second) // ready once the first config is loaded
	playEnvoyREADME(t, dialRLS(t, addr))
}

// playEnvoyREADME plays the calls of envoy ratelimit's README on the
// configs of envoyREADMEConfigs and checks envoy ratelimit's answers.
func playEnvoyREADME(t *testing.T, c *rlsClient) {
	t.Helper()
	call := func(domain string, ds ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := c.call(&rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
		if err != nil {
			t.Fatalf("%s: %v", domain, err)
		}
		return resp
	}
	limitOf := func(st *rlsv3.RateLimitResponse_DescriptorStatus) (uint32, rlsv3.RateLimitResponse_RateLimit_Unit) {
		return st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit()
	}

	// messaging: Envoy sends both descriptors; each is limited by its own
	// entry, the nested one (5 a day) and the value-less one (100 a day).
	for i := range 5 {
		resp := call("messaging", entries("message_type", "marketing", "to_number", "2061111111"), entries("to_number", "2061111111"))
		if n, u := limitOf(resp.Statuses[0]); resp.OverallCode != rlsv3.RateLimitResponse_OK || n != 5 || u != rlsv3.RateLimitResponse_RateLimit_DAY ||
			resp.Statuses[0].LimitRemaining != uint32(4-i) {
			t.Fatalf("marketing call %d: %v", i+1, resp)
		}
		if n, u := limitOf(resp.Statuses[1]); n != 100 || u != rlsv3.RateLimitResponse_RateLimit_DAY || resp.Statuses[1].LimitRemaining != uint32(99-i) {
			t.Fatalf("marketing call %d, the number's limit: %v", i+1, resp.Statuses[1])
		}
	}
	resp := call("messaging", entries("message_type", "marketing", "to_number", "2061111111"), entries("to_number", "2061111111"))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("6th marketing message: %v, want OVER_LIMIT", resp)
	}
	// Another number has its own counters (a value-less key counts per
	// value); a message that is not marketing only meets the 100.
	if resp := call("messaging", entries("message_type", "marketing", "to_number", "2062222222")); resp.Statuses[0].LimitRemaining != 4 {
		t.Fatalf("another number: %v", resp)
	}
	if resp := call("messaging", entries("message_type", "transactional", "to_number", "2061111111")); resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("a transactional message matched %v; envoy has no limit for it", resp.Statuses[0])
	}

	// edge_proxy_per_ip: the specific value wins over the value-less key;
	// requests_per_unit 0 blocks.
	if n, _ := limitOf(call("edge_proxy_per_ip", entries("remote_address", "50.0.0.5")).Statuses[0]); n != 1 {
		t.Fatalf("50.0.0.5: limit %d, want its own 1", n)
	}
	if resp := call("edge_proxy_per_ip", entries("remote_address", "50.0.0.5")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("50.0.0.5 twice: %v", resp)
	}
	if n, _ := limitOf(call("edge_proxy_per_ip", entries("remote_address", "192.0.2.1")).Statuses[0]); n != 3 {
		t.Fatalf("any other address: limit %d, want 3", n)
	}
	if resp := call("edge_proxy_per_ip", entries("remote_address", "50.0.0.6")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != 0 {
		t.Fatalf("blocked address: %v", resp)
	}

	// internal: unlimited, shadow, replaces.
	if st := call("internal", entries("ldap", "x")).Statuses[0]; st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.LimitRemaining != math.MaxUint32 {
		t.Fatalf("unlimited: %v", st)
	}
	for i := range 3 {
		st := call("internal", entries("azure", "a")).Statuses[0]
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit.GetRequestsPerUnit() != 2 || st.LimitRemaining != uint32(max(1-i, 0)) {
			t.Fatalf("shadow call %d: %v, want OK with the limit reported", i+1, st)
		}
	}
	for range 3 {
		resp := call("internal", entries("key1", "k"), entries("key2", "k"))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].CurrentLimit != nil || resp.Statuses[1].CurrentLimit.GetRequestsPerUnit() != 10 {
			t.Fatalf("key1 replaced by key2: %v", resp)
		}
	}
	call("internal", entries("key1", "k"))
	if resp := call("internal", entries("key1", "k")); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("key1 alone, twice: %v, want OVER_LIMIT (its limit applies when not replaced)", resp)
	}
}
