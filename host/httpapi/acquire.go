package httpapi

import (
	"context"
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

// AcquireSlotPoll is how often /v1/acquire asks again for a request that
// waits for an in-flight slot: a release can free one at any moment, which
// no retry-after foretells.
const AcquireSlotPoll = 20 * time.Millisecond

// handleAcquire waits up to timeout_ms for permission: a denied check is
// retried after its retry-after while that fits in the time left, and an
// admitted request with a shaping delay is answered when it may leave.
// A denied check consumes nothing, so waiting costs no quota. When the
// client goes away the wait ends and nothing more is consumed.
//
// A request with a lease id waits in line for in-flight slots
// (host.CheckRequest.Queue): each check keeps its place, slots go to the
// line in order of arrival, and it asks again every AcquireSlotPoll (or at
// the wait's end) while a slot rule denies it. One that gives up leaves the
// line at once.
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
	req.Queue = req.LeaseID != "" || req.DedupID != ""
	ctx := r.Context()
	deadline := time.Now().Add(time.Duration(body.TimeoutMS) * time.Millisecond)
	for {
		res := s.check.Check(ctx, req)
		wait := res.RetryAfter
		slot := false
		switch {
		case res.Allowed:
			wait = maxDelay(&res)
		case slotDenied(&res):
			// Ask again soon, and once more at the end of the wait.
			slot, wait = true, AcquireSlotPoll
			if wait = min(wait, time.Until(deadline)); res.RetryAfter > 0 {
				wait = min(wait, res.RetryAfter)
			}
		}
		// Answer now when there is nothing to wait for, or when the wait
		// does not fit: a denial as is, an admission with its delay_ms.
		if wait <= 0 || res.FailClosed || res.BadRequest != nil || (!slot && time.Now().Add(wait).After(deadline)) {
			if !res.Allowed {
				s.leaveLine(ctx, req)
			}
			s.respondCheck(w, &res)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.leaveLine(ctx, req)
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

// slotDenied reports whether an enforcing rule that holds slots denied res.
func slotDenied(res *host.Result) bool {
	for i := range res.Results {
		if rr := &res.Results[i]; rr.Releases && !rr.Allowed && !rr.Shadow {
			return true
		}
	}
	return false
}

// leaveLine takes a request that stops waiting out of the line of every
// slot rule, at once rather than when its place lapses (host's release of
// its lease id: denied, it holds no slot). Without a Holder it lapses.
func (s *Server) leaveLine(ctx context.Context, req *host.CheckRequest) {
	if !req.Queue || s.holds == nil {
		return
	}
	s.holds.Release(context.WithoutCancel(ctx), req)
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
