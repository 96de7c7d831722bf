package xds_test

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/credentials"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/host/xds"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
	"github.com/ruled-dev/ruled/internal/testkit/xdstest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

func newEngine(t *testing.T) *host.Engine {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return e
}

func runClient(t *testing.T, e *host.Engine, opts xds.Options) *xds.Client {
	t.Helper()
	opts.NodeID = xdstest.NodeID
	c := xds.New(e, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return c
}

// waitFor polls cond until it holds or the test's patience ends.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// codes asks the RLS service n times for domain with one entry key=value
// and returns the overall codes.
func codes(t *testing.T, e *host.Engine, domain, key, value string, n int) []rlsv3.RateLimitResponse_Code {
	t.Helper()
	rls := grpcapi.NewRateLimitService(e, nil, grpcapi.ServiceOptions{})
	var out []rlsv3.RateLimitResponse_Code
	for range n {
		resp, err := rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, resp.GetOverallCode())
	}
	return out
}

func overLimit(cs []rlsv3.RateLimitResponse_Code) int {
	n := 0
	for _, c := range cs {
		if c == rlsv3.RateLimitResponse_OVER_LIMIT {
			n++
		}
	}
	return n
}

// TestClientFollowsTheServer: a pushed config serves, an update replaces
// it, a refused update is NACKed with its reason while the old rules keep
// serving, and a restarted server's stream resumes.
func TestClientFollowsTheServer(t *testing.T) {
	cp := xdstest.Start(t, nil)
	e := newEngine(t)
	c := runClient(t, e, xds.Options{Server: cp.Addr, BackoffInitial: 50 * time.Millisecond})
	if err := c.ReadyErr(); err == nil {
		t.Fatal("ready before any config")
	}

	cp.Push(t, "1", xdstest.Limit("edge", "user", 2))
	waitFor(t, "version 1", func() bool { return c.State().Version == "1" })
	if err := c.ReadyErr(); err != nil {
		t.Fatal(err)
	}
	if st := e.Status(); st.Path != "xds://"+cp.Addr {
		t.Fatalf("engine status path %q", st.Path)
	}
	if got := overLimit(codes(t, e, "edge", "user", "alice", 3)); got != 1 {
		t.Fatalf("%d of 3 over the limit of 2, want 1", got)
	}

	cp.Push(t, "2", xdstest.Limit("edge", "user", 5), xdstest.Limit("api", "key", 1))
	waitFor(t, "version 2", func() bool { return c.State().Version == "2" })
	if got := overLimit(codes(t, e, "edge", "user", "bob", 5)); got != 0 {
		t.Fatalf("%d of 5 over the new limit of 5, want 0", got)
	}
	if got := overLimit(codes(t, e, "api", "key", "k1", 2)); got != 1 {
		t.Fatalf("%d of 2 over the api limit of 1, want 1", got)
	}

	bad := xdstest.Limit("edge", "user", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	cp.Push(t, "3", bad)
	waitFor(t, "the NACK of version 3", func() bool { _, nacks := cp.Seen(); return len(nacks) > 0 })
	_, nacks := cp.Seen()
	if !strings.Contains(nacks[0], "xds:edge:") || !strings.Contains(nacks[0], "rate_limit has no unit") {
		t.Fatalf("NACK %q: want the resource and the reason", nacks[0])
	}
	if st := c.State(); st.Version != "2" || st.LastError == nil {
		t.Fatalf("after a refused update: %+v", st)
	}
	if got := overLimit(codes(t, e, "edge", "user", "carol", 5)); got != 0 {
		t.Fatalf("the old limit of 5 no longer serves: %d of 5 over", got)
	}

	// The server goes away and comes back on the same address with a new
	// config: the stream resumes and the client loads it.
	cp.Stop()
	waitFor(t, "the stream to end", func() bool { return !c.State().Connected })
	cp.Push(t, "4", xdstest.Limit("edge", "user", 1))
	cp.Restart(t)
	waitFor(t, "version 4 after the restart", func() bool { return c.State().Version == "4" })
	if got := overLimit(codes(t, e, "edge", "user", "dave", 2)); got != 1 {
		t.Fatalf("%d of 2 over the limit of 1, want 1", got)
	}
	// The stream opened after the restart said it held version 2, the one
	// loaded last (3 was refused).
	if opened := cp.Opened(); len(opened) < 2 || opened[0] != "" || opened[len(opened)-1] != "2" {
		t.Fatalf("versions the streams opened with: %q, want \"\" first and 2 after the restart", opened)
	}
	// The client ACKs once it has loaded 4: the server hears it after.
	waitFor(t, "the ACK of version 4", func() bool { acks, _ := cp.Seen(); return len(acks) > 0 && acks[len(acks)-1] == "4" })
}

// TestClientMutualTLS: with mTLS the client presents its certificate and
// checks the server's; without a certificate the server wants, the client
// is never configured.
func TestClientMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "xds-ca")
	serverCreds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS(t)},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert})
	cp := xdstest.Start(t, serverCreds)
	cp.Push(t, "1", xdstest.Limit("edge", "user", 2))

	without := runClient(t, newEngine(t), xds.Options{Server: cp.Addr, BackoffInitial: 50 * time.Millisecond,
		TLS: &tls.Config{RootCAs: ca.Pool()}})
	e := newEngine(t)
	with := runClient(t, e, xds.Options{Server: cp.Addr, BackoffInitial: 50 * time.Millisecond,
		TLS: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, "ratelimit").TLS(t)}}})
	waitFor(t, "the mTLS client's version 1", func() bool { return with.State().Version == "1" })
	if got := overLimit(codes(t, e, "edge", "user", "alice", 3)); got != 1 {
		t.Fatalf("%d of 3 over the limit of 2, want 1", got)
	}
	if st := without.State(); st.Configured || without.ReadyErr() == nil {
		t.Fatalf("a client without a certificate was configured: %+v", st)
	}
}
