package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// MiddlewareOptions configure Middleware. The zero value checks every
// request with its RemoteAddr's IP and lets requests through when ruled
// cannot be asked.
type MiddlewareOptions struct {
	// IP returns the client's address. Default: the host part of
	// r.RemoteAddr. Behind a proxy, return the address the proxy saw, and
	// only believe forwarding headers that your own proxy sets.
	IP func(r *http.Request) string
	// User returns the authenticated user, if any (request.user). Default:
	// none.
	User func(r *http.Request) string
	// Attrs returns extra attributes for the rules (attrs). Default: none.
	Attrs func(r *http.Request) map[string]string
	// Headers names the request headers sent to ruled. Nil sends all but
	// the credentials (Authorization, Cookie, Proxy-Authorization); an
	// empty non-nil slice sends none.
	Headers []string
	// Skip lets the requests for which it returns true through unchecked
	// (health checks, static files).
	Skip func(r *http.Request) bool
	// FailClosed answers 503 when ruled cannot be asked (unreachable, time
	// out, an error answer). By default such requests go through
	// (fail-open).
	FailClosed bool
	// OnError is told every failure to ask ruled. Default: a warning on
	// slog.Default().
	OnError func(r *http.Request, err error)
	// InFlight makes each request hold its in-flight slots (rules of the
	// concurrency plugin) while the handler runs: its check carries a
	// lease id (LeaseID, which no rate limit sees), and when the answer
	// holds a slot
	// the middleware renews it every RenewEvery while the handler runs
	// and releases it (Client.Release) when the handler returns or
	// panics, before the answer is sent. A request the middleware let
	// through because ruled could not be asked holds nothing. With
	// InFlight, checks are not decided from client leases (WithLeases).
	InFlight bool
	// LeaseID returns the lease id of a request under InFlight. Default:
	// 16 random bytes in hex. Return a request id only when your own
	// proxy sets it: a client that chooses its id can send the id of a
	// request in flight and share its slot.
	LeaseID func(r *http.Request) string
	// RenewEvery is how often InFlight renews the slots of a running
	// request; keep it under half of the smallest ttl of the rules (a
	// renewal that fails is tried again at the next tick). Default
	// DefaultRenewEvery.
	RenewEvery time.Duration
	// Deny writes the answer to a denied request, whose RateLimit,
	// RateLimit-Policy and Retry-After headers are already set. Default:
	// 429 Too Many Requests, or 503 when ruled failed closed, with a short
	// text body.
	Deny func(w http.ResponseWriter, r *http.Request, a *Answer)
}

// DefaultRenewEvery is MiddlewareOptions.RenewEvery's default: a third of
// the concurrency plugin's default ttl (30s).
const DefaultRenewEvery = 10 * time.Second

// credentialHeaders are not sent to ruled unless MiddlewareOptions.Headers
// names them.
var credentialHeaders = map[string]bool{"Authorization": true, "Cookie": true, "Proxy-Authorization": true}

// Middleware limits the wrapped handler through ruled: each request is
// checked (ip, method, path, host, query, headers, user; one hit) before
// the handler runs. A denied request gets 429 with ruled's Retry-After,
// RateLimit and RateLimit-Policy headers and never reaches the handler; an
// allowed one carries the RateLimit headers, and waits first when a
// shaping rule admits it with a delay. When ruled cannot be asked, the
// request goes through or gets 503, as FailClosed says. With InFlight, the
// slots an admitted request holds are renewed while it runs and released
// when it ends.
func Middleware(c *Client, o MiddlewareOptions) func(http.Handler) http.Handler {
	if o.OnError == nil {
		o.OnError = func(r *http.Request, err error) {
			slog.Default().Warn("ruled: rate limit check failed", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	if o.Deny == nil {
		o.Deny = deny
	}
	if o.LeaseID == nil {
		o.LeaseID = randomLeaseID
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = DefaultRenewEvery
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if o.Skip != nil && o.Skip(r) {
				next.ServeHTTP(w, r)
				return
			}
			cr := o.checkRequest(r)
			if o.InFlight {
				cr.LeaseID = o.LeaseID(r)
			}
			ans, err := c.Check(r.Context(), cr)
			if err != nil {
				if r.Context().Err() != nil {
					return // the client went away: nothing to answer
				}
				o.OnError(r, err)
				if o.FailClosed {
					http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			h := w.Header()
			for k, v := range ans.RateLimitHeader() {
				if k != "Retry-After" || !ans.Allowed {
					h[k] = v
				}
			}
			if !ans.Allowed {
				o.Deny(w, r, ans)
				return
			}
			if o.InFlight && ans.Held() {
				defer o.hold(c, r, cr)()
			}
			if d := ans.Delay(); d > 0 {
				t := time.NewTimer(d)
				defer t.Stop()
				select {
				case <-r.Context().Done():
					return
				case <-t.C:
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

// hold renews the slots cr holds every RenewEvery until the returned
// function is called, which stops the renewals, waits for one in flight
// (so that no renewal can take a slot again after the release), and
// releases the slots. Neither is cut short when the client goes away.
func (o *MiddlewareOptions) hold(c *Client, r *http.Request, cr CheckRequest) func() {
	ctx := context.WithoutCancel(r.Context())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(o.RenewEvery)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			ans, err := c.Renew(ctx, cr)
			switch {
			case err != nil:
				o.OnError(r, fmt.Errorf("renewing in-flight slots: %w", err))
			case !ans.Allowed:
				o.OnError(r, fmt.Errorf("renewing in-flight slots: refused (a lease expired and its slot was taken)"))
			}
		}
	})
	return func() {
		close(stop)
		wg.Wait()
		if _, err := c.Release(ctx, cr); err != nil {
			o.OnError(r, fmt.Errorf("releasing in-flight slots: %w", err))
		}
	}
}

// randomLeaseID is LeaseID's default: 16 random bytes in hex.
func randomLeaseID(*http.Request) string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

func deny(w http.ResponseWriter, _ *http.Request, a *Answer) {
	if a.FailClosed {
		http.Error(w, "rate limiter unavailable", http.StatusServiceUnavailable)
		return
	}
	http.Error(w, "too many requests", http.StatusTooManyRequests)
}

// checkRequest describes an incoming request to ruled.
func (o *MiddlewareOptions) checkRequest(r *http.Request) CheckRequest {
	req := Request{Method: r.Method, Path: r.URL.Path, Host: r.Host}
	if o.IP != nil {
		req.IP = o.IP(r)
	} else if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.IP = host
	} else {
		req.IP = r.RemoteAddr
	}
	if o.User != nil {
		req.User = o.User(r)
	}
	if q := r.URL.Query(); len(q) > 0 {
		req.Query = make(map[string]string, len(q))
		for k, v := range q {
			req.Query[k] = v[0]
		}
	}
	add := func(name string, vs []string) {
		if len(vs) == 0 {
			return
		}
		if req.Headers == nil {
			req.Headers = map[string]string{}
		}
		req.Headers[strings.ToLower(name)] = strings.Join(vs, ", ")
	}
	if o.Headers == nil {
		for k, vs := range r.Header {
			if !credentialHeaders[k] {
				add(k, vs)
			}
		}
	} else {
		for _, k := range o.Headers {
			add(k, r.Header.Values(k))
		}
	}
	cr := CheckRequest{Request: req}
	if o.Attrs != nil {
		cr.Attrs = o.Attrs(r)
	}
	return cr
}
