// Package httpapi is ruled's HTTP interface: the v1 check API, health
// endpoints and the RateLimit headers. It knows the engine's types and
// nothing about rules, plugins or Redis.
package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/ratelimitheader"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Checker decides requests; *host.Engine implements it.
type Checker interface {
	Check(ctx context.Context, req *host.CheckRequest) host.Result
}

// Options configure the handler.
type Options struct {
	// Checker answers /v1/check. Required.
	Checker Checker
	// Ready reports whether the daemon can decide (Redis answers); /readyz
	// answers 503 with its error. Nil means always ready.
	Ready func(ctx context.Context) error
	// Logger is the daemon's logger. Default slog.Default().
	Logger *slog.Logger
	// Leases, when set, serves /v1/lease and /v1/lease/return.
	Leases Leaser
	// Holds, when set, serves /v1/release and /v1/renew.
	Holds Holder
	// Admin serves the /v1/admin/ endpoints. They exist only when both
	// Admin and AdminToken are set.
	Admin Admin
	// AdminToken is the bearer token the admin endpoints require.
	AdminToken string
	// TrustedProxies are the peers whose forwarding headers (X-Real-IP,
	// X-Forwarded-*, X-Original-*) /v1/auth believes. Nil means
	// DefaultTrustedProxies (loopback); an empty non-nil slice trusts none.
	TrustedProxies []netip.Prefix
	// Metrics, when set, serves GET /metrics (Prometheus exposition).
	Metrics http.Handler
	// UI, when set, serves the status page under /ui/ (the handler sees
	// paths without the /ui prefix).
	UI http.Handler
	// Stats, when set, returns the JSON-encodable counters that
	// GET /v1/admin/stats serves to the status page.
	Stats func(ctx context.Context) any
	// Refunds says which clients may give quota back (negative hits, lease
	// returns). Default RefundsAllow.
	Refunds Refunds
	// LoopbackStatus serves the read-only admin endpoints (GET rules,
	// plugins, stats) without a token when AdminToken is empty, to requests
	// from a loopback peer naming a loopback host (no DNS rebinding). Set it
	// only when the listener is bound to loopback. Reload and reset stay off.
	LoopbackStatus bool
}

// Server is the HTTP handler of the v1 API.
type Server struct {
	check          Checker
	leaser         Leaser // Options.Leases
	holds          Holder // Options.Holds
	trustedProxies []netip.Prefix
	refunds        Refunds
	adminToken     string
	ready          func(ctx context.Context) error
	log            *slog.Logger
	mux            *http.ServeMux
}

// New returns the handler.
func New(o Options) *Server {
	s := &Server{check: o.Checker, trustedProxies: o.TrustedProxies, refunds: o.Refunds, adminToken: o.AdminToken,
		ready: o.Ready, log: o.Logger, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.trustedProxies == nil {
		s.trustedProxies = DefaultTrustedProxies
	}
	s.mux.HandleFunc("POST /v1/check", s.handleCheck)
	s.mux.HandleFunc("GET /v1/auth", s.handleAuth)
	// Envoy's ext_authz HTTP service calls path_prefix + the original path
	// with the original method: /v1/auth/<path>, any method.
	s.mux.HandleFunc("/v1/auth/", s.handleAuth)
	s.mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("POST /v1/check/batch", s.handleBatch)
	s.mux.HandleFunc("POST /v1/acquire", s.handleAcquire)
	if o.Leases != nil {
		s.leaser = o.Leases
		s.mux.HandleFunc("POST /v1/lease", s.handleLease)
		s.mux.HandleFunc("POST /v1/lease/return", s.handleLeaseReturn)
	}
	if o.Holds != nil {
		s.holds = o.Holds
		s.mux.HandleFunc("POST /v1/release", s.handleRelease)
		s.mux.HandleFunc("POST /v1/renew", s.handleRenew)
	}
	if o.Admin != nil && (o.AdminToken != "" || o.LoopbackStatus) {
		s.mountAdmin(o.Admin, o.AdminToken, o.Stats)
	}
	if o.Metrics != nil {
		s.mux.Handle("GET /metrics", o.Metrics)
	}
	if o.UI != nil {
		s.mux.Handle("GET /ui/", http.StripPrefix("/ui", o.UI))
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleCheck(w http.ResponseWriter, r *http.Request) {
	var body checkBody
	apiErr := decodeJSON(w, r, &body)
	var req *host.CheckRequest
	if apiErr == nil {
		req, apiErr = s.checkRequest(r, &body)
	}
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if ci, ok := s.check.(intoChecker); ok {
		res := results.Get().(*host.Result)
		ci.CheckInto(r.Context(), req, res)
		s.respondCheck(w, res)
		clear(res.Results) // keep no subjects or errors alive in the pool
		results.Put(res)
		return
	}
	res := s.check.Check(r.Context(), req)
	s.respondCheck(w, &res)
}

// intoChecker is a Checker that can fill a caller's Result (*host.Engine):
// the handler then reuses Results from a pool.
type intoChecker interface {
	CheckInto(ctx context.Context, req *host.CheckRequest, res *host.Result)
}

var results = sync.Pool{New: func() any { return new(host.Result) }}

// respondCheck writes a check answer: 200, 429 or 503 with the headers, or
// 400 when a plugin refused the request as bad input.
func (s *Server) respondCheck(w http.ResponseWriter, res *host.Result) {
	if res.BadRequest != nil {
		writeError(w, badRequest(res))
		return
	}
	status := http.StatusOK
	switch {
	case res.FailClosed:
		status = http.StatusServiceUnavailable
	case !res.Allowed:
		status = http.StatusTooManyRequests
	}
	ratelimitheader.Set(w.Header(), res)
	buf := answerBuffers.Get().(*[]byte)
	*buf = appendResult((*buf)[:0], res)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(*buf)
	if cap(*buf) <= 64<<10 {
		answerBuffers.Put(buf)
	}
}

// Error is the body of every 4xx answer: {"error": {"code": ..., "message": ...}}.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// badRequest is the error for a request a plugin refused as bad input.
func badRequest(res *host.Result) *Error {
	return newBadRequest("invalid_request", "%s", res.BadRequest.Error())
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, map[string]*Error{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// NewServer returns an http.Server for h with the time-outs ruled serves
// with, so that slow or idle clients cannot hold connections for ever. The
// load harness uses it too, to measure what production runs.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}
