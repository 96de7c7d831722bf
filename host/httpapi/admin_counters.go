package httpapi

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/ruled-dev/ruled/host"
)

// counterAnswer is one subject of GET /v1/admin/counters.
type counterAnswer struct {
	Subject   string `json:"subject"`
	Used      int64  `json:"used"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	ResetMS   int64  `json:"reset_ms"`
	// Limited is true when a request of one unit would be denied now.
	Limited bool `json:"limited"`
	// Hashed is true when subject is the form keys hold it in ("#" and a
	// hash): the subject was too long to keep.
	Hashed bool `json:"hashed,omitempty"`
	// Error is why the subject could not be read (its limit is unknown).
	Error string `json:"error,omitempty"`
}

// countersAnswer is the answer of GET /v1/admin/counters.
type countersAnswer struct {
	Rule       string          `json:"rule"`
	Counters   []counterAnswer `json:"counters"`
	NextCursor string          `json:"next_cursor"`
}

// mountCounters adds GET /v1/admin/counters behind read (the token, or
// loopback-only without one).
func (s *Server) mountCounters(a Admin, read func(http.HandlerFunc) http.HandlerFunc) {
	s.mux.HandleFunc("GET /v1/admin/counters", read(func(w http.ResponseWriter, r *http.Request) {
		q, e := counterQuery(r, "rule", "cursor", "limit")
		if e != nil {
			writeError(w, e)
			return
		}
		limit := host.DefaultCounterPage
		if v := q.Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > host.MaxCounterPage {
				writeError(w, newBadRequest("invalid_field", "limit: want an integer from 1 to %d, got %q", host.MaxCounterPage, v))
				return
			}
			limit = n
		}
		page, err := a.Counters().Page(r.Context(), q.Get("rule"), q.Get("cursor"), limit)
		if e := adminError(err, "counters_failed"); e != nil {
			writeError(w, e)
			return
		}
		ans := countersAnswer{Rule: page.Rule, Counters: make([]counterAnswer, len(page.Counters)), NextCursor: page.Next}
		for i, c := range page.Counters {
			ca := counterAnswer{Subject: c.Subject, Used: c.Used, Limit: c.Limit, Remaining: c.Remaining,
				ResetMS: ceilMS(c.Reset), Limited: c.Limited, Hashed: c.Hashed}
			if c.Err != nil {
				ca.Error = c.Err.Error()
			}
			ans.Counters[i] = ca
		}
		writeJSON(w, http.StatusOK, ans)
	}))
}

// mountClearCounters adds DELETE /v1/admin/counters behind guard (the
// token: it is mounted only with one).
func (s *Server) mountClearCounters(a Admin, guard func(http.HandlerFunc) http.HandlerFunc) {
	s.mux.HandleFunc("DELETE /v1/admin/counters", guard(func(w http.ResponseWriter, r *http.Request) {
		q, e := counterQuery(r, "rule")
		if e != nil {
			writeError(w, e)
			return
		}
		n, err := a.Counters().Clear(r.Context(), q.Get("rule"))
		if e := adminError(err, "clear_failed"); e != nil {
			writeError(w, e)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"rule": q.Get("rule"), "deleted": n})
	}))
}

// counterQuery parses the query of a counters call: rule is required, and
// every parameter must be one of allowed, given once.
func counterQuery(r *http.Request, allowed ...string) (url.Values, *Error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, newBadRequest("invalid_field", "query: %v", err)
	}
	for name, vals := range q {
		if !slices.Contains(allowed, name) {
			return nil, newBadRequest("unknown_field", "unknown query parameter %s", name)
		}
		if len(vals) > 1 {
			return nil, newBadRequest("invalid_field", "%s: given %d times, want once", name, len(vals))
		}
	}
	if q.Get("rule") == "" {
		return nil, newBadRequest("invalid_field", "rule: required")
	}
	return q, nil
}
