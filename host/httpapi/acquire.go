package httpapi

import (
	"net/http"
	"time"

	"github.com/ruled-dev/ruled/host"
)

// MaxAcquireWait bounds timeout_ms of /v1/acquire.
const MaxAcquireWait = time.Minute

// acquireBody is a check body with how long the caller is willing to wait.
type acquireBody struct {
	checkBody
	TimeoutMS int64 `json:"timeout_ms"`
}

// handleAcquire waits up to timeout_ms for permission: a denied check is
// retried after its retry-after while that fits in the time left, and an
// admitted request with a shaping delay is answered when it may leave.
// A denied check consumes nothing, so waiting costs no quota. When the
// client goes away the wait ends and nothing more is consumed.
func (s *Server) handleAcquire(w http.ResponseWriter, r *http.Request) {
	var body acquireBody
	if e := decodeJSON(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	if body.TimeoutMS < 0 || time.Duration(body.TimeoutMS)*time.Millisecond > MaxAcquireWait {
		writeError(w, newBadRequest("invalid_field", "timeout_ms: must be between 0 and %d, got %d", MaxAcquireWait.Milliseconds(), body.TimeoutMS))
		return
	}
	req, e := s.checkRequest(r, &body.checkBody)
	if e != nil {
		writeError(w, e)
		return
	}
	ctx := r.Context()
	deadline := time.Now().Add(time.Duration(body.TimeoutMS) * time.Millisecond)
	for {
		res := s.check.Check(ctx, req)
		wait := res.RetryAfter
		if res.Allowed {
			wait = maxDelay(&res)
		}
		// Answer now when there is nothing to wait for, or when the wait
		// does not fit: a denial as is, an admission with its delay_ms.
		if wait <= 0 || res.FailClosed || res.BadRequest != nil || time.Now().Add(wait).After(deadline) {
			s.respondCheck(w, &res)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if res.Allowed { // the shaping delay has passed: the request may leave now
			for i := range res.Results {
				res.Results[i].Delay = 0
			}
			s.respondCheck(w, &res)
			return
		}
	}
}

// maxDelay is the longest shaping delay of the enforcing rules of res.
func maxDelay(res *host.Result) time.Duration {
	var d time.Duration
	for _, rr := range res.Results {
		if !rr.Shadow {
			d = max(d, rr.Delay)
		}
	}
	return d
}
