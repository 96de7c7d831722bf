package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	accesslogconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/data/accesslog/v3"
	grpcalsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/grpc/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	alsv3 "github.com/envoyproxy/go-control-plane/envoy/service/accesslog/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ruled-dev/ruled/client"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// inflightRules: a rate limit per client IP, high enough never to deny,
// and an in-flight limit per path on three paths: /orders for the load,
// /reports for a request that outlives its lease, /exports for an app
// killed mid-request.
const inflightRules = `
rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
  - name: orders-in-flight
    when: request.path == "/orders"
    subject: request.path
    plugin: concurrency
    config: {limit: 4, ttl: 3s}
  - name: reports-in-flight
    when: request.path == "/reports"
    subject: request.path
    plugin: concurrency
    config: {limit: 1, ttl: 1s}
  - name: exports-in-flight
    when: request.path == "/exports"
    subject: request.path
    plugin: concurrency
    config: {limit: 2, ttl: 2s}
`

// inflightAppEnv names, in the environment of this test binary run as an
// app (inflightAppProcess), the base URL of the ruled it asks.
const inflightAppEnv = "RULED_TEST_INFLIGHT_APP"

// inflightAppProcess serves an app behind the Go middleware with InFlight
// on a free loopback port, says "listening <addr>" on stdout, and says "in
// handler" for each request, which it never answers: it holds its slot
// until the process is killed.
func inflightAppProcess(base string) int {
	mw := client.Middleware(client.New(base), client.MiddlewareOptions{InFlight: true, FailClosed: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("listening", ln.Addr())
	err = http.Serve(ln, mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		fmt.Println("in handler")
		select {}
	})))
	fmt.Fprintln(os.Stderr, err)
	return 1
}

// upstream counts the requests it is handling at once.
type upstream struct {
	now  atomic.Int64 // requests in the handler
	most atomic.Int64 // the most at once
}

// enter counts a request in; leave counts it out.
func (u *upstream) enter() {
	n := u.now.Add(1)
	for m := u.most.Load(); n > m && !u.most.CompareAndSwap(m, n); m = u.most.Load() {
	}
}

func (u *upstream) leave() { u.now.Add(-1) }

// checkLoad fails unless the upstream never handled more than limit
// requests at once, the load met the limit (some admitted, some denied),
// and afterwards each instance of ds sees, through slots, every slot free
// and the rate rule on the same requests counting exactly the admitted
// ones (a release or a renewal gives no count back).
func (u *upstream) checkLoad(t *testing.T, limit, admitted, denied int64, slots func(*daemon) (free, counted int64), ds ...*daemon) {
	t.Helper()
	if most := u.most.Load(); most > limit {
		t.Errorf("the upstream handled %d requests at once, limit %d", most, limit)
	}
	if admitted == 0 || denied == 0 {
		t.Errorf("admitted %d, denied %d: the load should meet the limit", admitted, denied)
	}
	for _, d := range ds {
		free, counted := slots(d)
		if free != limit {
			t.Errorf("after the load, %d of %d slots free: releases were lost", free, limit)
		}
		if counted != admitted {
			t.Errorf("the rate rule counted %d for %d admitted requests: a release or a renewal changed a rate count", counted, admitted)
		}
	}
}

// inflightApp serves up behind the Go middleware (InFlight, failing
// closed) asking ruled at ruledBase; its handler runs hold while counted.
func inflightApp(t *testing.T, ruledBase string, renewEvery time.Duration, up *upstream, hold func()) *httptest.Server {
	t.Helper()
	mw := client.Middleware(client.New(ruledBase), client.MiddlewareOptions{
		InFlight: true, FailClosed: true, RenewEvery: renewEvery,
		OnError: func(r *http.Request, err error) { t.Errorf("%s %s: %v", r.Method, r.URL.Path, err) },
	})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		up.enter()
		defer up.leave()
		hold()
	})))
	t.Cleanup(srv.Close)
	return srv
}

// freeSlots is what the rule on path has free, and what per-ip counted,
// asked of ruled at base.
func freeSlots(t *testing.T, base, path string) (free, counted int64) {
	t.Helper()
	a, err := client.New(base).Check(context.Background(), client.CheckRequest{
		Request: client.Request{IP: "127.0.0.1", Path: path}, Peek: true})
	if err != nil || len(a.Results) != 2 {
		t.Fatalf("peek %s: %+v, %v", path, a, err)
	}
	return a.Results[1].Remaining, 1_000_000 - a.Results[0].Remaining
}

// TestInFlightThroughTheGoMiddleware holds the in-flight limit end to end
// through the real binary: two ruled instances on one Redis, an upstream
// behind the Go middleware of each, many clients. The upstream never
// handles more than the limit at once, releases give back no rate-limit
// count, every slot is free once the load stops, a request that outlives
// its lease keeps its slot by renewals, and an app killed mid-request
// frees its slot within the lease's ttl.
func TestInFlightThroughTheGoMiddleware(t *testing.T) {
	rs := redistest.Start(t)
	d1 := spawnDaemon(t, inflightRules, "--redis", rs.URL())
	d2 := spawnDaemon(t, inflightRules, "--redis", rs.URL())

	t.Run("load", func(t *testing.T) {
		// Two apps, each asking its own ruled, in front of one upstream.
		var up upstream
		hold := func() { time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) }
		apps := []*httptest.Server{inflightApp(t, d1.base, 0, &up, hold), inflightApp(t, d2.base, 0, &up, hold)}
		const clients, each = 24, 120
		var admitted, denied atomic.Int64
		var wg sync.WaitGroup
		for c := range clients {
			wg.Go(func() {
				hc := &http.Client{}
				for i := range each {
					resp, err := hc.Get(apps[(c+i)%2].URL + "/orders")
					if err != nil {
						t.Error(err)
						return
					}
					_ = resp.Body.Close()
					switch resp.StatusCode {
					case http.StatusOK:
						admitted.Add(1)
					case http.StatusTooManyRequests:
						denied.Add(1)
					default:
						t.Errorf("GET /orders: %s", resp.Status)
					}
				}
			})
		}
		wg.Wait()
		t.Logf("%d requests: %d admitted, %d denied, at most %d at once in the upstream", clients*each, admitted.Load(), denied.Load(), up.most.Load())
		up.checkLoad(t, 4, admitted.Load(), denied.Load(), func(d *daemon) (int64, int64) { return freeSlots(t, d.base, "/orders") }, d1, d2)
	})

	t.Run("renewal", func(t *testing.T) {
		// One slot, a lease of 1s renewed every 250ms, a request of 2.5s:
		// the slot stays taken the whole time, then is free.
		release := make(chan struct{})
		var longUp, otherUp upstream
		long := inflightApp(t, d1.base, 250*time.Millisecond, &longUp, func() { <-release })
		other := inflightApp(t, d2.base, 0, &otherUp, func() {})
		var once sync.Once
		end := func() { once.Do(func() { close(release) }) }
		t.Cleanup(end) // before the apps close, which waits for their handlers
		done := make(chan int)
		go func() {
			resp, err := http.Get(long.URL + "/reports")
			if err != nil {
				t.Error(err)
				done <- 0
				return
			}
			_ = resp.Body.Close()
			done <- resp.StatusCode
		}()
		waitFor(t, 10*time.Second, "the long request in the handler", func() bool { return longUp.now.Load() == 1 })
		for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			resp, err := http.Get(other.URL + "/reports")
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("while the long request runs, another got %s: its slot was lost", resp.Status)
			}
		}
		end()
		if code := <-done; code != http.StatusOK {
			t.Fatalf("the long request: %d", code)
		}
		if free, _ := freeSlots(t, d2.base, "/reports"); free != 1 {
			t.Fatalf("after the long request, %d of 1 slot free", free)
		}
	})

	t.Run("killed app", func(t *testing.T) {
		cmd, lines := startHelper(t, inflightAppEnv+"="+d1.base)
		line, err := lines.ReadString('\n')
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if err != nil || !ok {
			t.Fatalf("app: %q, %v", line, err)
		}
		go func() {
			if resp, err := http.Get("http://" + addr + "/exports"); err == nil { // ends when the app is killed
				_ = resp.Body.Close()
			}
		}()
		if line, err := lines.ReadString('\n'); err != nil || line != "in handler\n" {
			t.Fatalf("app: %q, %v", line, err)
		}
		// The lease was taken before the handler ran: it expires by now + ttl.
		expiry := time.Now().Add(2 * time.Second)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
		if free, _ := freeSlots(t, d2.base, "/exports"); free != 1 {
			t.Fatalf("right after the kill, %d of 2 slots free, want 1: the killed app's slot is held until its ttl", free)
		}
		time.Sleep(time.Until(expiry))
		if free, _ := freeSlots(t, d2.base, "/exports"); free != 2 {
			t.Fatalf("2s (the ttl) after the app acquired its slot, %d of 2 slots free: the killed app's slot did not come back", free)
		}
	})
}

// envoyInflightRules: a rate limit and an in-flight limit on the route
// descriptor; the rule matches only when lease_id is not among the
// descriptor's keys. The route "unlogged" has a shorter lease.
const envoyInflightRules = `
rules:
  - name: per-route
    when: attrs["descriptor_keys"] == "route"
    subject: attrs["route"]
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
  - name: unlogged-in-flight
    when: attrs["descriptor_keys"] == "route" && attrs["route"] == "unlogged"
    subject: attrs["route"]
    plugin: concurrency
    config: {limit: 2, ttl: 1s}
    stop: true
  - name: route-in-flight
    when: attrs["descriptor_keys"] == "route"
    subject: attrs["route"]
    plugin: concurrency
    config: {limit: 4, ttl: 3s}
`

// simulatedEnvoy does what Envoy does for a request under a rate limit
// filter and a gRPC access log: it asks RLS with the route and the
// request's x-request-id (a request_headers action to lease_id), and once
// the upstream has answered it logs the request, with the dynamic metadata
// the rate limit filter kept, on its access log stream.
type simulatedEnvoy struct {
	rls rlsv3.RateLimitServiceClient
	als alsv3.AccessLogService_StreamAccessLogsClient
}

func newSimulatedEnvoy(t *testing.T, rlsAddr, alsAddr string) *simulatedEnvoy {
	t.Helper()
	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	als, err := alsv3.NewAccessLogServiceClient(dial(alsAddr)).StreamAccessLogs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return &simulatedEnvoy{rls: rlsv3.NewRateLimitServiceClient(dial(rlsAddr)), als: als}
}

// acquire asks RLS for the request id on route; the answer's metadata is
// what the access log entry carries.
func (e *simulatedEnvoy) acquire(t *testing.T, route, id string) (bool, *structpb.Struct) {
	resp, err := e.rls.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "edge",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{entries("route", route, "lease_id", id)}})
	if err != nil {
		t.Error(err)
		return false, nil
	}
	return resp.OverallCode == rlsv3.RateLimitResponse_OK, resp.DynamicMetadata
}

// logDone sends the access log entry of a request whose rate limit answer
// had metadata md.
func (e *simulatedEnvoy) logDone(t *testing.T, id string, md *structpb.Struct) {
	err := e.als.Send(&alsv3.StreamAccessLogsMessage{
		Identifier: &alsv3.StreamAccessLogsMessage_Identifier{Node: &corev3.Node{Id: "simulated-envoy"}, LogName: "ruled-release"},
		LogEntries: &alsv3.StreamAccessLogsMessage_HttpLogs{HttpLogs: &alsv3.StreamAccessLogsMessage_HTTPAccessLogEntries{
			LogEntry: []*accesslogv3.HTTPAccessLogEntry{{
				CommonProperties: &accesslogv3.AccessLogCommon{Metadata: &corev3.Metadata{
					FilterMetadata: map[string]*structpb.Struct{"envoy.filters.http.ratelimit": md}}},
				Request: &accesslogv3.HTTPRequestProperties{RequestId: id},
			}}}},
	})
	if err != nil {
		t.Error(err)
	}
}

// flush closes the access log stream once ruled has handled every entry.
func (e *simulatedEnvoy) flush(t *testing.T) {
	if _, err := e.als.CloseAndRecv(); err != nil {
		t.Error(err)
	}
}

// routeSlots is what the in-flight rule of route has free, and what
// per-route counted, asked of ruled at base.
func routeSlots(t *testing.T, base, route string) (free, counted int64) {
	t.Helper()
	a, err := client.New(base).Check(context.Background(), client.CheckRequest{
		Attrs: map[string]string{"domain": "edge", "descriptor_keys": "route", "route": route}, Peek: true})
	if err != nil || len(a.Results) != 2 {
		t.Fatalf("peek %s: %+v, %v", route, a, err)
	}
	return a.Results[1].Remaining, 1_000_000 - a.Results[0].Remaining
}

// TestInFlightThroughEnvoysServices holds the in-flight limit for Envoy
// through the real binary: simulated Envoys acquire through RLS with the
// request id and release through the access log service, with real gRPC,
// on two ruled instances (each Envoy logs to the instance it did not ask).
// The upstream never handles more than the limit at once, every slot is
// free once the logs are in, a forged release token frees nothing, and a
// request Envoy never logs frees its slot within the lease's ttl.
func TestInFlightThroughEnvoysServices(t *testing.T) {
	rs := redistest.Start(t)
	addrs := []string{freePort(t), freePort(t)}
	ds := []*daemon{
		spawnDaemon(t, envoyInflightRules, "--redis", rs.URL(), "--grpc-listen", addrs[0]),
		spawnDaemon(t, envoyInflightRules, "--redis", rs.URL(), "--grpc-listen", addrs[1]),
	}
	for _, d := range ds {
		d.waitReady(20 * time.Second)
	}

	t.Run("load", func(t *testing.T) {
		const envoys, each = 16, 150
		var up upstream
		var admitted, denied atomic.Int64
		var wg sync.WaitGroup
		for w := range envoys {
			e := newSimulatedEnvoy(t, addrs[w%2], addrs[(w+1)%2])
			wg.Go(func() {
				defer e.flush(t)
				for i := range each {
					id := fmt.Sprintf("req-%d-%d", w, i)
					ok, md := e.acquire(t, "orders", id)
					if !ok {
						denied.Add(1)
						continue
					}
					admitted.Add(1)
					if md.GetFields()["ruled_release"].GetStringValue() == "" {
						t.Errorf("%s admitted without a release token: %v", id, md)
						return
					}
					up.enter()
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
					up.leave()
					e.logDone(t, id, md)
				}
			})
		}
		wg.Wait()
		t.Logf("%d requests: %d admitted, %d denied, at most %d at once in the upstream", envoys*each, admitted.Load(), denied.Load(), up.most.Load())
		up.checkLoad(t, 4, admitted.Load(), denied.Load(), func(d *daemon) (int64, int64) { return routeSlots(t, d.base, "orders") }, ds...)
	})

	t.Run("forged token", func(t *testing.T) {
		e := newSimulatedEnvoy(t, addrs[0], addrs[1])
		ok, md := e.acquire(t, "reports", "held-1")
		tok := md.GetFields()["ruled_release"].GetStringValue()
		if !ok || tok == "" {
			t.Fatalf("acquire: %v, %v", ok, md)
		}
		body, mac, _ := strings.Cut(tok, ".")
		// The token of another request id, under this one's signature.
		other := strings.Replace(mustB64(t, body), "held-1", "held-2", 1)
		forged := []string{"", "x", body, body + "." + mac[:len(mac)-2] + "AA",
			base64.RawURLEncoding.EncodeToString([]byte(other)) + "." + mac}
		for _, f := range forged {
			e.logDone(t, "held-1", &structpb.Struct{Fields: map[string]*structpb.Value{"ruled_release": structpb.NewStringValue(f)}})
		}
		e.logDone(t, "held-1", nil) // a request without a token
		e.flush(t)
		if free, _ := routeSlots(t, ds[0].base, "reports"); free != 3 {
			t.Fatalf("after forged tokens, %d of 4 slots free, want 3: a forged token released the slot", free)
		}
		e = newSimulatedEnvoy(t, addrs[0], addrs[1])
		e.logDone(t, "held-1", md)
		e.flush(t)
		if free, _ := routeSlots(t, ds[0].base, "reports"); free != 4 {
			t.Fatalf("after the real token, %d of 4 slots free, want 4", free)
		}
	})

	t.Run("never logged", func(t *testing.T) {
		e := newSimulatedEnvoy(t, addrs[0], addrs[1])
		if ok, _ := e.acquire(t, "unlogged", "lost-1"); !ok {
			t.Fatal("acquire denied")
		}
		expiry := time.Now().Add(time.Second) // the lease was taken before the answer
		if free, _ := routeSlots(t, ds[1].base, "unlogged"); free != 1 {
			t.Fatalf("right after the acquire, %d of 2 slots free, want 1", free)
		}
		time.Sleep(time.Until(expiry))
		if free, _ := routeSlots(t, ds[1].base, "unlogged"); free != 2 {
			t.Fatalf("1s (the ttl) after the acquire, %d of 2 slots free: an unlogged request's slot did not come back", free)
		}
		e.flush(t)
	})
}

// mustB64 decodes unpadded base64url.
func mustB64(t *testing.T, s string) string {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestInFlightEnvoyConfigInTheDocsIsValid: the in-flight block of
// docs/envoy.md is one Envoy accepts (every field and type name known, its
// validation rules pass), and it says what ruled relies on: x-request-id
// sent as lease_id, and a gRPC access log of the requests whose rate limit
// metadata has a release token.
func TestInFlightEnvoyConfigInTheDocsIsValid(t *testing.T) {
	block := docYAMLBlock(t, "envoy.md", "rate_limits:")
	var top struct {
		RateLimits []map[string]any `yaml:"rate_limits"`
		AccessLog  []map[string]any `yaml:"access_log"`
	}
	if err := yaml.Unmarshal([]byte(block), &top); err != nil || len(top.RateLimits) != 1 || len(top.AccessLog) != 1 {
		t.Fatalf("docs/envoy.md's block: %v (%d rate limits, %d access logs)", err, len(top.RateLimits), len(top.AccessLog))
	}
	var rl routev3.RateLimit
	var al accesslogconfigv3.AccessLog
	for _, m := range []struct {
		raw any
		msg interface {
			proto.Message
			ValidateAll() error
		}
	}{{top.RateLimits[0], &rl}, {top.AccessLog[0], &al}} {
		js, err := json.Marshal(m.raw)
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(js, m.msg); err != nil {
			t.Fatalf("not Envoy's %T: %v", m.msg, err)
		}
		if err := m.msg.ValidateAll(); err != nil {
			t.Fatalf("Envoy's validation refuses the %T: %v", m.msg, err)
		}
	}
	if h := rl.GetActions()[1].GetRequestHeaders(); h.GetHeaderName() != "x-request-id" || h.GetDescriptorKey() != grpcapi.LeaseIDKey {
		t.Fatalf("the second action %v: want x-request-id as %s", rl.GetActions()[1], grpcapi.LeaseIDKey)
	}
	m := al.GetFilter().GetMetadataFilter().GetMatcher()
	if m.GetFilter() != grpcapi.RateLimitFilterNamespace || len(m.GetPath()) != 1 || m.GetPath()[0].GetKey() != grpcapi.ReleaseMetadataKey ||
		!m.GetValue().GetPresentMatch() {
		t.Fatalf("the access log filter %v: want the requests with %s under %s", m, grpcapi.ReleaseMetadataKey, grpcapi.RateLimitFilterNamespace)
	}
	var cfg grpcalsv3.HttpGrpcAccessLogConfig
	if err := al.GetTypedConfig().UnmarshalTo(&cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.GetCommonConfig().GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
		t.Fatal("the access log names no cluster")
	}
}

// docYAMLBlock is the text of the YAML block of docs/<doc> that starts
// with opening.
func docYAMLBlock(t *testing.T, doc, opening string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", doc))
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```yaml\n"+opening)
	end := strings.Index(block, "```")
	if !ok || end < 0 {
		t.Fatalf("docs/%s: no YAML block starting with %q", doc, opening)
	}
	return opening + block[:end]
}

// startHelper runs this test binary with env added, as one of the helper
// processes TestMain turns it into, and returns it with its stdout; the
// process is killed when the test ends.
func startHelper(t *testing.T, env string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}
