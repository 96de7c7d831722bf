package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
	"github.com/ruled-dev/ruled/internal/testkit/xdstest"
)

// envFixture reads a KEY=VALUE file (# comments) and applies replace.
func envFixture(t *testing.T, path string, replace map[string]string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		if r, ok := replace[k]; ok {
			v = r
		}
		seen[k] = true
		env = append(env, k+"="+v)
	}
	for k, v := range replace {
		if !seen[k] {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// statsdListener collects the statsd lines sent to it.
type statsdListener struct {
	pc    net.PacketConn
	mu    sync.Mutex
	lines []string
}

func listenStatsd(t *testing.T) *statsdListener {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	l := &statsdListener{pc: pc}
	go func() {
		buf := make([]byte, 65536)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			l.lines = append(l.lines, strings.Split(string(buf[:n]), "\n")...)
			l.mu.Unlock()
		}
	}()
	return l
}

func (l *statsdListener) has(prefix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			return true
		}
	}
	return false
}

// TestEnvoyGatewayDeployment runs the binary as Envoy Gateway deploys
// envoy ratelimit: as /bin/ratelimit, with the environment of Envoy
// Gateway's default deployment (testdata/envoy-gateway/ratelimit.env; only
// addresses and certificate paths changed), its configs pushed by a
// go-control-plane snapshot server over ADS with mTLS as Envoy Gateway's
// runner serves them, asked by a real RLS client over mTLS.
func TestEnvoyGatewayDeployment(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "ratelimit")
	if err := os.Symlink(buildRuled(t), bin); err != nil {
		t.Fatal(err)
	}
	ca := tlstest.NewCA(t, "envoy-gateway")
	crt, key := ca.Peer(t).Write(t, dir, "tls")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	cp := xdstest.Start(t, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS(t)},
		ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert}))
	rdb := redistest.Start(t)
	statsd := listenStatsd(t)
	statsdHost, statsdPort, _ := net.SplitHostPort(statsd.pc.LocalAddr().String())
	env := envFixture(t, filepath.Join("testdata", "envoy-gateway", "ratelimit.env"), map[string]string{
		"CONFIG_GRPC_XDS_SERVER_URL": cp.Addr, "REDIS_URL": rdb.Addr(),
		"GRPC_SERVER_TLS_CERT": crt, "GRPC_SERVER_TLS_KEY": key, "GRPC_SERVER_TLS_CA_CERT": caFile,
		"CONFIG_GRPC_XDS_CLIENT_TLS_CERT": crt, "CONFIG_GRPC_XDS_CLIENT_TLS_KEY": key, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT": caFile,
		"STATSD_HOST": statsdHost, "STATSD_PORT": statsdPort,
	})
	rl := startRatelimit(t, bin, env)
	grpcAddr, logs := rl.grpc, rl.logs
	healthcheck := rl.healthcheck

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.Client(t, "envoy").TLS(t)}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	// limitFor asks once for user and returns the limit that applies, 0
	// for none, and the answer's code.
	ask := func(user string) (uint32, rlsv3.RateLimitResponse_Code) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: entriesList("user", user)})
		if err != nil {
			return 0, rlsv3.RateLimitResponse_UNKNOWN
		}
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(), resp.GetOverallCode()
	}

	// The gRPC listener is mTLS: a client without a certificate from the
	// CA is refused.
	anon, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool()})))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = rlsv3.NewRateLimitServiceClient(anon).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: entriesList("user", "x")})
	cancel()
	if err == nil {
		t.Fatal("a client without a certificate was answered")
	}

	// FORCE_START_WITHOUT_INITIAL_CONFIG=true: healthy with no config yet,
	// once Redis answers; then the pushed config serves.
	waitFor(t, 30*time.Second, "/healthcheck 200", func() bool { return healthcheck() == http.StatusOK })
	cp.Push(t, "1", xdstest.Limit("edge", "user", 2))
	waitFor(t, 10*time.Second, "the limit of 2 from version 1", func() bool { n, _ := ask("probe-1"); return n == 2 })
	for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		if _, code := ask("alice"); code != want {
			t.Fatalf("alice's request %d (limit 2): %v, want %v", i+1, code, want)
		}
	}

	// An update applies within 2 s.
	cp.Push(t, "2", xdstest.Limit("edge", "user", 5))
	took := waitFor(t, 10*time.Second, "the limit of 5 from version 2", func() bool { n, _ := ask("probe-2"); return n == 5 })
	if took > 2*time.Second {
		t.Errorf("version 2 served %s after it was pushed, want within 2s", took)
	}

	// A bad update is NACKed, with its reason, and the old config serves.
	bad := xdstest.Limit("edge", "user", 1)
	bad.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	cp.Push(t, "3", bad)
	waitFor(t, 10*time.Second, "the NACK of version 3", func() bool { _, nacks := cp.Seen(); return len(nacks) > 0 })
	if _, nacks := cp.Seen(); !strings.Contains(nacks[0], "rate_limit has no unit") {
		t.Errorf("NACK %q lacks the reason", nacks[0])
	}
	if n, _ := ask("probe-3"); n != 5 {
		t.Fatalf("after the refused version 3 the limit is %d, want version 2's 5", n)
	}

	// The xDS server goes away and comes back: the stream resumes.
	cp.Stop()
	cp.Push(t, "4", xdstest.Limit("edge", "user", 3))
	cp.Restart(t)
	waitFor(t, 60*time.Second, "the limit of 3 after the xDS server's restart", func() bool { n, _ := ask("probe-4"); return n == 3 })

	// envoy ratelimit's stats reach statsd under its names (flushed every
	// 10 s, envoy ratelimit's default).
	waitFor(t, 30*time.Second, "statsd lines with envoy ratelimit's names", func() bool {
		return statsd.has("ratelimit.service.rate_limit.edge.user.total_hits:") &&
			statsd.has("ratelimit.service.rate_limit.edge.user.over_limit:") &&
			statsd.has("ratelimit_server.ShouldRateLimit.total_requests:") &&
			statsd.has("ratelimit.service.config_load_success:")
	})

	// Health is truthful: Redis gone, NOT_SERVING and /healthcheck 500.
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"} {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q before the outage: %v %v", svc, resp.GetStatus(), err)
		}
	}
	rdb.Kill()
	waitFor(t, 30*time.Second, "gRPC health NOT_SERVING with Redis gone", func() bool {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING
	})
	if code := healthcheck(); code != http.StatusInternalServerError {
		t.Errorf("/healthcheck with Redis gone: %d, want 500", code)
	}
	if strings.Contains(logs.String(), "not support") {
		t.Errorf("Envoy Gateway's environment has variables ruled warns about:\n%s", grepLines(logs.String(), "not support"))
	}
}

// entriesList is one descriptor of the key and value.
func entriesList(key, value string) []*rlcommonv3.RateLimitDescriptor {
	return []*rlcommonv3.RateLimitDescriptor{entries(key, value)}
}

// ratelimitProc is the binary running as envoy ratelimit.
type ratelimitProc struct {
	http, grpc, debug string // listen addresses
	logs              *lockedBuffer
}

// startRatelimit runs bin (named ratelimit, or ruled with the argument
// envoy-ratelimit in args) with env, its listeners (envoy ratelimit's
// 0.0.0.0:8080, 8081 and 6070 by default) on free loopback ports, until
// the test ends.
func startRatelimit(t *testing.T, bin string, env []string, args ...string) *ratelimitProc {
	t.Helper()
	p := &ratelimitProc{http: freePort(t), grpc: freePort(t), debug: freePort(t), logs: &lockedBuffer{}}
	for _, hp := range []struct{ addr, host, port string }{{p.http, "HOST", "PORT"}, {p.grpc, "GRPC_HOST", "GRPC_PORT"}, {p.debug, "DEBUG_HOST", "DEBUG_PORT"}} {
		h, port, _ := net.SplitHostPort(hp.addr)
		env = append(env, hp.host+"="+h, hp.port+"="+port)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(env, "PATH="+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Error("ratelimit did not stop within 15s of SIGINT")
		}
		if logs := p.logs.String(); t.Failed() || strings.Contains(logs, "panic") || strings.Contains(logs, "DATA RACE") {
			t.Errorf("ratelimit's log:\n%s", tail(logs, 60))
		}
	})
	return p
}

// healthcheck is GET /healthcheck's status, 0 when it does not answer.
func (p *ratelimitProc) healthcheck() int {
	resp, err := http.Get("http://" + p.http + "/healthcheck")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// configMap writes files into dir as Kubernetes mounts a ConfigMap: each
// file a symlink through ..data to a timestamped directory, which an
// update replaces by swapping the ..data symlink.
type configMap struct {
	t   *testing.T
	dir string
	n   int
}

func (m *configMap) update(files map[string]string) {
	m.t.Helper()
	m.n++
	version := fmt.Sprintf("..2026_11_28_%02d", m.n)
	if err := os.Mkdir(filepath.Join(m.dir, version), 0o755); err != nil {
		m.t.Fatal(err)
	}
	for name, text := range files {
		writeFile(m.t, filepath.Join(m.dir, version), name, text)
		link := filepath.Join(m.dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				m.t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(m.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		m.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(m.dir, "..data")); err != nil {
		m.t.Fatal(err)
	}
}

// TestEnvoyRatelimitFileMode: ruled envoy-ratelimit with envoy ratelimit's
// file settings (RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config, where Istio's
// sample mounts a ConfigMap) answers the README's scenarios, follows a
// ConfigMap update, keeps serving through a bad one, shows the config at
// /rlconfig, adds no RateLimit headers (envoy ratelimit's default), serves
// its Prometheus listener when asked, and names the variables it does not
// support in one WARN line.
func TestEnvoyRatelimitFileMode(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for name, text := range envoyREADMEConfigs {
		files[name] = text
	}
	later := func(n int, unit string) string {
		return fmt.Sprintf("domain: later\ndescriptors:\n  - key: k\n    rate_limit: {unit: %s, requests_per_unit: %d}\n", unit, n)
	}
	files["later.yaml"] = later(7, "day")
	cm := &configMap{t: t, dir: conf}
	cm.update(files)
	rdb := redistest.Start(t)
	prom := freePort(t)
	rl := startRatelimit(t, buildRuled(t), []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr(), "USE_STATSD=false", "LOG_LEVEL=info",
		"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=" + prom,
		"CACHE_KEY_PREFIX=eg-", "EXTRA_TAGS=team:edge"}, "envoy-ratelimit")
	waitFor(t, 30*time.Second, "/healthcheck 200", func() bool { return rl.healthcheck() == http.StatusOK })
	c := dialRLS(t, rl.grpc)
	playEnvoyREADME(t, c)

	ask := func() *rlsv3.RateLimitResponse {
		resp, err := c.call(&rlsv3.RateLimitRequest{Domain: "later", Descriptors: entriesList("k", "v")})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	limitOf := func() uint32 { return ask().GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() }
	if resp := ask(); resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 7 || len(resp.GetResponseHeadersToAdd()) != 0 {
		t.Fatalf("later: %v, want the limit 7 and no headers", resp)
	}
	files["later.yaml"] = later(8, "day")
	cm.update(files)
	waitFor(t, 20*time.Second, "the ConfigMap update served", func() bool { return limitOf() == 8 })
	get := func(url string) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	if body := get("http://" + rl.debug + "/rlconfig"); !strings.Contains(body, `(domain "later"`) || !strings.Contains(body, "config: {limit: 8, window: 24h}") {
		t.Errorf("/rlconfig does not show the config that serves:\n%s", body)
	}
	// A bad update keeps the config that serves.
	files["later.yaml"] = later(9, "fortnight")
	cm.update(files)
	waitFor(t, 20*time.Second, "the refusal logged", func() bool { return strings.Contains(rl.logs.String(), "fortnight") })
	if n := limitOf(); n != 8 {
		t.Fatalf("after a bad update the limit is %d, want 8", n)
	}
	if body := get("http://" + prom + "/metrics"); !strings.Contains(body, "ruled_decisions_total") {
		t.Errorf("the Prometheus listener does not serve ruled's metrics:\n%s", tail(body, 5))
	}
	// The variables ruled does not support are named, once.
	if warns := grepLines(rl.logs.String(), "not support"); strings.Count(warns, "\n") != 0 || !strings.Contains(warns, "EXTRA_TAGS,CACHE_KEY_PREFIX") {
		t.Errorf("want one WARN line naming EXTRA_TAGS,CACHE_KEY_PREFIX, got:\n%s", warns)
	}
}

// TestEnvoyHealthyWithConfig: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
// keeps the instance unhealthy until a config is there.
func TestEnvoyHealthyWithConfig(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	rdb := redistest.Start(t)
	rl := startRatelimit(t, buildRuled(t), []string{"RUNTIME_ROOT=" + root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr(),
		"USE_STATSD=false", "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true"}, "envoy-ratelimit")
	// Unready for want of a config, and for that alone (/readyz says why).
	waitFor(t, 30*time.Second, "/readyz: no config loaded yet", func() bool {
		resp, err := http.Get("http://" + rl.http + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "no rate limit config loaded yet")
	})
	if code := rl.healthcheck(); code != http.StatusInternalServerError {
		t.Fatalf("/healthcheck with no config: %d, want 500", code)
	}
	writeFile(t, conf, "a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
	waitFor(t, 30*time.Second, "/healthcheck 200 once a config is loaded", func() bool { return rl.healthcheck() == http.StatusOK })
}

// connCounter counts the client connections a gRPC client opens.
type connCounter struct{ n atomic.Int32 }

func (c *connCounter) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context   { return ctx }
func (c *connCounter) HandleRPC(context.Context, stats.RPCStats)                         {}
func (c *connCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (c *connCounter) HandleConn(_ context.Context, s stats.ConnStats) {
	if _, ok := s.(*stats.ConnBegin); ok {
		c.n.Add(1)
	}
}

// TestEnvoyMaxConnectionAge: GRPC_MAX_CONNECTION_AGE closes a client's
// connection once it is that old (the client connects again), so that
// Envoy's connections spread over new replicas.
func TestEnvoyMaxConnectionAge(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, conf, "edge.yaml", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n")
	rdb := redistest.Start(t)
	rl := startRatelimit(t, buildRuled(t), []string{"RUNTIME_ROOT=" + root, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rdb.Addr(),
		"USE_STATSD=false", "GRPC_MAX_CONNECTION_AGE=1s", "GRPC_MAX_CONNECTION_AGE_GRACE=1s"}, "envoy-ratelimit")
	waitFor(t, 30*time.Second, "/healthcheck 200", func() bool { return rl.healthcheck() == http.StatusOK })
	counter := &connCounter{}
	conn, err := grpc.NewClient(rl.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(counter))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	waitFor(t, 30*time.Second, "a second connection after the first grew old", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: entriesList("user", "u")}, grpc.WaitForReady(true))
		return counter.n.Load() >= 2
	})
}
