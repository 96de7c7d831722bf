package client

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Request describes the HTTP request that rules see as request.*.
type Request struct {
	IP     string `json:"ip,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	Host   string `json:"host,omitempty"`
	User   string `json:"user,omitempty"`
	// Headers are matched case-insensitively: ruled lower-cases the names.
	Headers map[string]string `json:"headers,omitempty"`
	Query   map[string]string `json:"query,omitempty"`
}

// CheckRequest is one question put to ruled.
type CheckRequest struct {
	// Request is what rules see as request.*.
	Request Request
	// Attrs is a free-form map that rules see as attrs.
	Attrs map[string]string
	// Hits is the number of units asked for. 0 means ruled's default, 1;
	// set Peek to ask without consuming. A negative number refunds units
	// where the rule's plugin supports it.
	Hits int64
	// Peek asks for hits 0: the answer shows the state, nothing is
	// consumed. Hits is then ignored.
	Peek bool
	// DedupID makes a retried request idempotent where the plugin supports
	// it (at most 256 bytes).
	DedupID string
	// LeaseID names the request's in-flight slots (at most 256 bytes):
	// rules whose plugins hold slots (the concurrency limiter) take it as
	// their dedup id, and no other rule sees it. Release and Renew name
	// the slots by it.
	LeaseID string
	// BestEffort grants what is left instead of denying, where the plugin
	// supports it.
	BestEffort bool
}

// checkBody is the JSON body of a check, an acquire and each batch entry.
type checkBody struct {
	Request    Request           `json:"request"`
	Attrs      map[string]string `json:"attrs,omitempty"`
	Hits       *int64            `json:"hits,omitempty"`
	DedupID    string            `json:"dedup_id,omitempty"`
	LeaseID    string            `json:"lease_id,omitempty"`
	BestEffort bool              `json:"best_effort,omitempty"`
	TimeoutMS  *int64            `json:"timeout_ms,omitempty"` // acquire only
}

func (r *CheckRequest) body() checkBody {
	b := checkBody{Request: r.Request, Attrs: r.Attrs, DedupID: r.DedupID, LeaseID: r.LeaseID, BestEffort: r.BestEffort}
	switch {
	case r.Peek:
		b.Hits = new(int64)
	case r.Hits != 0:
		hits := r.Hits // not &r.Hits: r would escape on every Check
		b.Hits = &hits
	}
	return b
}

// Answer is ruled's decision on one CheckRequest.
type Answer struct {
	// Allowed is true when every non-shadow rule allowed the request.
	Allowed bool
	// FailClosed is true when the request was denied because a rule could
	// not decide and its on_error policy is deny (ruled answers 503).
	FailClosed bool
	// RetryAfter is how long to wait before asking again when denied.
	RetryAfter time.Duration
	// Results holds one entry per evaluated rule, in rule order; empty
	// when no rule matched.
	Results []Result
	// StatusCode is ruled's HTTP status: 200 allowed, 429 denied, 503
	// fail-closed. For a batch entry it is derived the same way.
	StatusCode int
	// Header holds the RateLimit, RateLimit-Policy and Retry-After headers
	// ruled sent, ready to copy to a response. Nil for batch entries and
	// leased answers (RateLimitHeader builds them).
	Header http.Header
	// Leased is true when the client decided from a lease (WithLeases),
	// without asking ruled.
	Leased bool

	policy string // RateLimit-Policy of the lease, for a leased answer
}

// RateLimitHeader returns the RateLimit, RateLimit-Policy and Retry-After
// fields of the answer: Header as ruled sent it, or, for a leased answer,
// the same fields built from the lease's policy and the answer's Results
// (draft-ietf-httpapi-ratelimit-headers-11, as ruled writes them).
func (a *Answer) RateLimitHeader() http.Header {
	if !a.Leased || a.Header != nil {
		return a.Header
	}
	h := http.Header{}
	if a.policy != "" {
		h.Set("RateLimit-Policy", a.policy)
	}
	var b []byte
	retry := max(ceilSeconds(a.RetryAfter), 1)
	for _, r := range a.Results {
		// The rules ruled reports limits of (a block's limit 0 among
		// them) are those the lease's RateLimit-Policy lists.
		if !policyLists(a.policy, r.Rule) || (!a.Allowed && r.Allowed) {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, r.Rule)
		if r.Allowed {
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, max(r.Remaining, 0), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSeconds(r.Reset), 10)
			continue
		}
		t := max(ceilSeconds(r.RetryAfter), 1)
		retry = max(retry, t)
		b = append(b, ";r=0;t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	if len(b) > 0 {
		h.Set("RateLimit", string(b))
	}
	if !a.Allowed {
		h.Set("Retry-After", strconv.FormatInt(retry, 10))
	}
	return h
}

// policyLists reports whether the RateLimit-Policy field policy lists
// rule: its items are "rule";q=LIMIT[;w=WINDOW], comma-separated, and rule
// names need no escapes.
func policyLists(policy, rule string) bool {
	for policy != "" {
		var item string
		item, policy, _ = strings.Cut(policy, ",")
		item = strings.TrimLeft(item, " \t")
		if n := len(rule); len(item) > n+1 && item[0] == '"' && item[1:1+n] == rule && item[1+n] == '"' {
			return true
		}
	}
	return false
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Delay is the longest shaping delay among the non-shadow rules: an
// admitted request should wait this long before it proceeds.
func (a *Answer) Delay() time.Duration {
	var d time.Duration
	for _, r := range a.Results {
		if !r.Shadow {
			d = max(d, r.Delay)
		}
	}
	return d
}

// Held reports whether some rule holds a slot for the request's LeaseID:
// the request should then be released (Client.Release) when it ends.
func (a *Answer) Held() bool {
	for _, r := range a.Results {
		if r.Held {
			return true
		}
	}
	return false
}

// Result is one rule's decision.
type Result struct {
	Rule      string
	Subject   string
	Plugin    string
	Allowed   bool
	Granted   int64
	Limit     int64
	Remaining int64
	// Reset is the time until the quota is fully available again.
	Reset time.Duration
	// RetryAfter is the time until a denied request would be allowed.
	RetryAfter time.Duration
	// Delay is how long an admitted request should wait (shaping).
	Delay  time.Duration
	Shadow bool
	// Exempt is true for an exempt rule, which admitted the request
	// without counting it.
	Exempt bool
	// Held is true when the rule holds a slot for the request's LeaseID
	// (an in-flight limit, the concurrency plugin) until Client.Release
	// frees it or its lease expires.
	Held bool
	// Degraded is "" when the plugin decided, else the on_error policy
	// that decided ("allow", "deny"); Error then says why.
	Degraded string
	Error    string
}

// rateLimitHeaders are the headers of ruled's answer that Answer.Header
// keeps.
var rateLimitHeaders = []string{"RateLimit", "RateLimit-Policy", "Retry-After"}

// wireAnswer is the JSON body of a check answer.
type wireAnswer struct {
	Allowed      *bool        `json:"allowed"`
	RetryAfterMS int64        `json:"retry_after_ms"`
	Results      []wireResult `json:"results"`
}

type wireResult struct {
	Rule         string `json:"rule"`
	Subject      string `json:"subject"`
	Plugin       string `json:"plugin"`
	Allowed      bool   `json:"allowed"`
	Granted      int64  `json:"granted"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	Shadow       bool   `json:"shadow"`
	Exempt       bool   `json:"exempt"`
	Held         bool   `json:"held"`
	Degraded     string `json:"degraded"`
	Error        string `json:"error"`
}

// result converts a decoded result.
func (r *wireResult) result() Result {
	return Result{
		Rule: r.Rule, Subject: r.Subject, Plugin: r.Plugin, Allowed: r.Allowed,
		Granted: r.Granted, Limit: r.Limit, Remaining: r.Remaining,
		Reset: ms(r.ResetMS), RetryAfter: ms(r.RetryAfterMS), Delay: ms(r.DelayMS),
		Shadow: r.Shadow, Exempt: r.Exempt, Held: r.Held, Degraded: r.Degraded, Error: r.Error,
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// answer converts a decoded body. ok is false when the body is not a check
// answer (it lacks "allowed").
func (w *wireAnswer) answer() (a *Answer, ok bool) {
	if w.Allowed == nil {
		return nil, false
	}
	a = &Answer{Allowed: *w.Allowed, RetryAfter: ms(w.RetryAfterMS), Results: make([]Result, len(w.Results))}
	for i, r := range w.Results {
		a.Results[i] = r.result()
		if !r.Allowed && !r.Shadow && r.Degraded == "deny" {
			a.FailClosed = true
		}
	}
	switch {
	case a.FailClosed:
		a.StatusCode = http.StatusServiceUnavailable
	case !a.Allowed:
		a.StatusCode = http.StatusTooManyRequests
	default:
		a.StatusCode = http.StatusOK
	}
	return a, true
}

// errorBody is ruled's 4xx body: {"error": {"code": ..., "message": ...}}.
type errorBody struct {
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}
