package httpapi_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// authSlotRules: one request at a time on /reports, for an hour.
const authSlotRules = `rules:
  - name: reports-in-flight
    when: request.path == "/reports"
    subject: request.path
    plugin: concurrency
    config: {limit: 1, ttl: 1h}
`

// TestAuthTakesTheLeaseIDFromXRequestID: forward-auth names a request's
// in-flight slot by the proxy's X-Request-Id, believed from a trusted
// proxy only: the same id keeps its slot, another is denied, and from an
// untrusted peer the header is ignored (the concurrency plugin then
// refuses the acquire as bad input).
func TestAuthTakesTheLeaseIDFromXRequestID(t *testing.T) {
	e, _, _ := startOpenAPIEngine(t, redistest.Start(t), authSlotRules)
	trusting := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e}))
	t.Cleanup(trusting.Close)
	untrusting := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, TrustedProxies: []netip.Prefix{}}))
	t.Cleanup(untrusting.Close)
	auth := func(base, id string) int {
		t.Helper()
		req, err := http.NewRequest("GET", base+"/v1/auth/reports", nil) // the path as Envoy's ext_authz sends it
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		base, id string
		want     int
	}{
		{trusting.URL, "r1", http.StatusOK},
		{trusting.URL, "r2", http.StatusTooManyRequests},
		{trusting.URL, "r1", http.StatusOK}, // the same request's slot, renewed
		{untrusting.URL, "r1", http.StatusBadRequest},
	} {
		if got := auth(c.base, c.id); got != c.want {
			t.Errorf("X-Request-Id %s (trusted %v): %d, want %d", c.id, c.base == trusting.URL, got, c.want)
		}
	}
}

// queueRecorder is the engine as /v1/acquire's Checker, noting each lease
// id that has asked while waiting in line.
type queueRecorder struct {
	e      *host.Engine
	mu     sync.Mutex
	queued map[string]bool
}

func (q *queueRecorder) Check(ctx context.Context, req *host.CheckRequest) host.Result {
	res := q.e.Check(ctx, req)
	if req.Queue {
		q.mu.Lock()
		q.queued[req.LeaseID] = true
		q.mu.Unlock()
	}
	return res
}

func (q *queueRecorder) asked(id string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.queued[id]
}

// TestAcquireWaitsInLineForSlots: requests that wait for an in-flight slot
// (/v1/acquire with a lease_id) are served in order of arrival as slots
// are released; a check that does not wait is behind the line even when a
// slot is free; a waiter that gives up leaves the line and takes nothing.
func TestAcquireWaitsInLineForSlots(t *testing.T) {
	e, _, _ := startOpenAPIEngine(t, redistest.Start(t), authSlotRules)
	q := &queueRecorder{e: e, queued: map[string]bool{}}
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: q, Holds: e}))
	t.Cleanup(srv.Close)
	post := func(path, body string) int {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	slot := func(id string) string { return `{"request": {"path": "/reports"}, "lease_id": "` + id + `"}` }
	if code := post("/v1/check", slot("holder")); code != http.StatusOK {
		t.Fatalf("the holder: %d", code)
	}
	// Waiters arrive one after another; w-quick gives up after 50ms.
	served := make(chan string, 8)
	var wg sync.WaitGroup
	for _, w := range []struct {
		id      string
		timeout int
	}{{"w0", 20000}, {"w-quick", 50}, {"w1", 20000}, {"w2", 20000}} {
		wg.Go(func() {
			code := post("/v1/acquire", `{"request": {"path": "/reports"}, "lease_id": "`+w.id+`", "timeout_ms": `+fmt.Sprint(w.timeout)+`}`)
			if code == http.StatusOK {
				served <- w.id
			} else {
				served <- w.id + " gave up"
			}
		})
		for deadline := time.Now().Add(10 * time.Second); !q.asked(w.id); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never asked", w.id)
			}
		}
	}
	if got := <-served; got != "w-quick gave up" {
		t.Fatalf("first answer %q, want w-quick giving up", got)
	}
	prev := "holder"
	for _, want := range []string{"w0", "w1", "w2"} {
		if code := post("/v1/release", slot(prev)); code != http.StatusOK {
			t.Fatalf("release %s: %d", prev, code)
		}
		// The slot is the line's: a check that does not wait is denied.
		if code := post("/v1/check", slot("newcomer")); code != http.StatusTooManyRequests {
			t.Fatalf("a newcomer while %s waits: %d, want 429", want, code)
		}
		if got := <-served; got != want {
			t.Fatalf("after %s released, %q was served, want %s: not in order of arrival", prev, got, want)
		}
		prev = want
	}
	wg.Wait()
	post("/v1/release", slot(prev))
	if code := post("/v1/check", slot("newcomer")); code != http.StatusOK {
		t.Fatalf("with the line empty and the slot free, a newcomer got %d", code)
	}
}
