package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/client"
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

// inflightApp serves up behind the Go middleware (InFlight, failing
// closed) asking ruled at ruledBase; its handler runs hold while counted.
func inflightApp(t *testing.T, ruledBase string, renewEvery time.Duration, up *upstream, hold func()) *httptest.Server {
	t.Helper()
	mw := client.Middleware(client.New(ruledBase), client.MiddlewareOptions{
		InFlight: true, FailClosed: true, RenewEvery: renewEvery,
		OnError: func(r *http.Request, err error) { t.Errorf("%s %s: %v", r.Method, r.URL.Path, err) },
	})
	srv := httptest.NewServer(mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		n := up.now.Add(1)
		for m := up.most.Load(); n > m && !up.most.CompareAndSwap(m, n); m = up.most.Load() {
		}
		hold()
		up.now.Add(-1)
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
		if most := up.most.Load(); most > 4 {
			t.Errorf("the upstream handled %d requests at once, limit 4", most)
		}
		if admitted.Load() == 0 || denied.Load() == 0 {
			t.Errorf("admitted %d, denied %d: the load should meet the limit", admitted.Load(), denied.Load())
		}
		for _, d := range []*daemon{d1, d2} {
			free, counted := freeSlots(t, d.base, "/orders")
			if free != 4 {
				t.Errorf("after the load, %d of 4 slots free: releases were lost", free)
			}
			if counted != admitted.Load() {
				t.Errorf("per-ip counted %d for %d admitted requests: a release or a renewal changed a rate count", counted, admitted.Load())
			}
		}
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
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), inflightAppEnv+"="+d1.base)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		lines := bufio.NewReader(out)
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
