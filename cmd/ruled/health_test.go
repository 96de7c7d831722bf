package main

// Health that tells the truth everywhere, against the real binary and a
// real redis-server on loopback: gRPC health follows /readyz, /readyz says
// which node failed, how, and whose rules degrade.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// healthServices are the services an Envoy may health-check over gRPC.
var healthServices = []string{"", "envoy.service.ratelimit.v3.RateLimitService", "ratelimit"}

// healthWatch records what the Watch streams of healthServices report.
type healthWatch struct {
	mu     sync.Mutex
	events map[string][]healthEvent
}

type healthEvent struct {
	at     time.Time
	status healthpb.HealthCheckResponse_ServingStatus
}

// watchHealth opens one Watch stream per service on conn, recorded until
// the test ends.
func watchHealth(t *testing.T, conn *grpc.ClientConn) *healthWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	hw := &healthWatch{events: map[string][]healthEvent{}}
	for _, name := range healthServices {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				resp, err := w.Recv()
				if err != nil {
					return
				}
				hw.mu.Lock()
				hw.events[name] = append(hw.events[name], healthEvent{time.Now(), resp.Status})
				hw.mu.Unlock()
			}
		}()
	}
	return hw
}

// reported waits until every service's stream reported want at or after
// since (an earlier report still standing counts), and returns the latest
// time one of them reported it.
func (hw *healthWatch) reported(t *testing.T, want healthpb.HealthCheckResponse_ServingStatus, since time.Time, within time.Duration) time.Time {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(10 * time.Millisecond) {
		var latest time.Time
		all := true
		hw.mu.Lock()
		for _, name := range healthServices {
			ev := hw.events[name]
			if len(ev) == 0 || ev[len(ev)-1].status != want {
				all = false
				break
			}
			// The first report of want in the run that ends the stream.
			i := len(ev) - 1
			for i > 0 && ev[i-1].status == want {
				i--
			}
			if ev[i].at.After(latest) {
				latest = ev[i].at
			}
		}
		got := map[string][]healthEvent{}
		for k, v := range hw.events {
			got[k] = v
		}
		hw.mu.Unlock()
		if all {
			if latest.Before(since) {
				latest = since
			}
			return latest
		}
		if time.Now().After(deadline) {
			t.Fatalf("Watch streams did not all report %v within %v: %v", want, within, got)
		}
	}
}

// healthIs polls Check for every service until each answers want, and
// returns when the last one did.
func healthIs(t *testing.T, hc healthpb.HealthClient, want healthpb.HealthCheckResponse_ServingStatus, within time.Duration) time.Time {
	t.Helper()
	for _, name := range healthServices {
		for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			cancel()
			if err == nil && resp.Status == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("gRPC health of %q: %v %v, want %v within %v", name, resp, err, want, within)
			}
		}
	}
	return time.Now()
}

// readyzIs polls /readyz until it answers want and returns the time it was
// seen and the body.
func (d *daemon) readyzIs(want int, within time.Duration) (time.Time, string) {
	d.t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		code, body := httpGet(d.t, d.base+"/readyz")
		if code == want {
			return time.Now(), body
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("/readyz %d %s, want %d within %v\n%s", code, body, want, within, tail(d.log.String(), 20))
		}
	}
}

// TestGRPCHealthFollowsReadiness: Redis killed, /readyz turns 503 and gRPC
// health of "" and of the rate limit service turns NOT_SERVING within 3 s
// of it, on Check and on Watch streams; /readyz names the node, the plugin
// whose rules degrade and that the connection was refused. Redis back on
// the same port: SERVING again within 3 s of /readyz answering 200.
func TestGRPCHealthFollowsReadiness(t *testing.T) {
	const bound = 3 * time.Second
	srv := redistest.Start(t)
	grpcAddr := freePort(t)
	d := startDaemon(t, "--redis", srv.URL(), "--grpc-listen", grpcAddr, "--watch=false")
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	healthIs(t, hc, healthpb.HealthCheckResponse_SERVING, 10*time.Second)
	hw := watchHealth(t, conn)
	hw.reported(t, healthpb.HealthCheckResponse_SERVING, time.Now(), 10*time.Second)

	srv.Kill()
	notReady, _ := d.readyzIs(503, 10*time.Second)
	if took := healthIs(t, hc, healthpb.HealthCheckResponse_NOT_SERVING, 10*time.Second).Sub(notReady); took > bound {
		t.Errorf("gRPC health NOT_SERVING %v after /readyz failed, over %v", took, bound)
	}
	if took := hw.reported(t, healthpb.HealthCheckResponse_NOT_SERVING, notReady, 10*time.Second).Sub(notReady); took > bound {
		t.Errorf("Watch streams reported NOT_SERVING %v after /readyz failed, over %v", took, bound)
	}
	// The reason: the node, the plugin, and what happened. The first
	// probe after the kill may find the old connection broken (EOF); the
	// next ones find it refused.
	var body string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var code int
		code, body = httpGet(t, d.base+"/readyz")
		if code == 503 && strings.Contains(body, "refused") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz %d %s: no \"refused\" within 5s", code, body)
		}
	}
	t.Logf("/readyz: %s", body)
	for _, want := range []string{srv.Addr(), "fixedwindow"} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz reason %s lacks %q", body, want)
		}
	}
	for _, bad := range []string{"plugin ,", "timeout", "deadline"} {
		if strings.Contains(body, bad) {
			t.Errorf("/readyz reason %s says %q of a refused connection", body, bad)
		}
	}

	srv.Restart()
	ready, _ := d.readyzIs(200, 10*time.Second)
	if took := healthIs(t, hc, healthpb.HealthCheckResponse_SERVING, 10*time.Second).Sub(ready); took > bound {
		t.Errorf("gRPC health SERVING %v after /readyz recovered, over %v", took, bound)
	}
	if took := hw.reported(t, healthpb.HealthCheckResponse_SERVING, ready, 10*time.Second).Sub(ready); took > bound {
		t.Errorf("Watch streams reported SERVING %v after /readyz recovered, over %v", took, bound)
	}

	// Shutting down: NOT_SERVING first, and the open Watch streams do not
	// hold the exit up for the gRPC server's 10 s graceful stop.
	stopping := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	hw.reported(t, healthpb.HealthCheckResponse_NOT_SERVING, stopping, 5*time.Second)
	select {
	case <-d.exited:
	case <-time.After(grpcStopTimeout / 2):
		t.Fatalf("ruled still running %v after SIGTERM with Watch streams open", grpcStopTimeout/2)
	}
}

// TestDegradedDecisionsMakeNotReady: Redis answers the probe (INFO) but
// holds every script (CLIENT PAUSE WRITE): decisions follow on_error, and
// once they have for longer than the breaker's cooldown (200 ms) /readyz
// answers 503 within 1 s, naming the plugin and the node, though
// ruled_redis_up stays 1. Unpaused, it is ready again.
func TestDegradedDecisionsMakeNotReady(t *testing.T) {
	const window, bound = 200 * time.Millisecond, time.Second
	srv := redistest.Start(t)
	d := startDaemon(t, "--redis", srv.URL(), "--watch=false")
	d.checkLimits("203.0.113.1")
	admin := srv.Client()
	ctx := context.Background()
	if err := admin.Do(ctx, "CLIENT", "PAUSE", "20000", "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	unpause := func() { _ = admin.Do(ctx, "CLIENT", "UNPAUSE").Err() }
	t.Cleanup(unpause)

	// Decisions keep coming, as traffic does.
	var mu sync.Mutex
	var firstDegraded time.Time
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	traffic.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v, err := d.tryCheck("/open", fmt.Sprintf("198.51.100.%d", i%250))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			if v.degraded != "" && firstDegraded.IsZero() {
				firstDegraded = time.Now()
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	})
	defer func() { close(stop); traffic.Wait() }()

	notReady, body := d.readyzIs(503, 10*time.Second)
	mu.Lock()
	first := firstDegraded
	mu.Unlock()
	if first.IsZero() {
		t.Fatalf("/readyz 503 (%s) before any decision degraded", body)
	}
	if took := notReady.Sub(first); took > window+bound {
		t.Errorf("/readyz 503 %v after decisions began to degrade, over %v + %v", took, window, bound)
	}
	t.Logf("/readyz 503 %v after the first degraded decision: %s", notReady.Sub(first).Round(time.Millisecond), body)
	for _, want := range []string{"decisions degraded", "fixedwindow", srv.Addr()} {
		if !strings.Contains(body, want) {
			t.Errorf("/readyz reason %s lacks %q", body, want)
		}
	}
	if up := d.metric("ruled_redis_up"); up != "1" {
		t.Errorf("ruled_redis_up %s: the probe failed too, so this test proves nothing of degraded decisions", up)
	}

	unpause()
	d.readyzIs(200, 5*time.Second)
}
