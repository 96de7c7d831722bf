package httpapi

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/ruled-dev/ruled/host"
)

// MaxBatch bounds the checks in one /v1/check/batch call.
const MaxBatch = 1000

// MaxAcquireWait bounds timeout_ms of /v1/acquire.
const MaxAcquireWait = time.Minute

// batchParallelism bounds the checks of one batch that run at once.
const batchParallelism = 16

// handleBatch answers many independent checks in one call, in order:
// {"checks": [<check body>, ...]} → 200 {"results": [<check answer>, ...]}.
// Bad input in any check rejects the whole batch with a 400 that names it.
func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Checks []checkBody `json:"checks"`
	}
	if e := decodeJSON(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	if len(body.Checks) > MaxBatch {
		writeError(w, newBadRequest("invalid_field", "checks: at most %d per batch, got %d", MaxBatch, len(body.Checks)))
		return
	}
	reqs := make([]*host.CheckRequest, len(body.Checks))
	for i := range body.Checks {
		req, e := body.Checks[i].toRequest()
		if e == nil && req.Hits < 0 {
			e = s.refundRefused(r, "hits")
		}
		if e != nil {
			e.Message = fmt.Sprintf("checks[%d].%s", i, e.Message)
			writeError(w, e)
			return
		}
		reqs[i] = req
	}
	answers := make([]*checkAnswer, len(reqs))
	// One bound for the whole batch (docs/operations.md, "Time bound").
	ctx, cancel := host.ShareDecisionTimeout(r.Context(), s.check)
	defer cancel()
	var wg sync.WaitGroup
	sem := make(chan struct{}, batchParallelism)
	for i, req := range reqs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			res := s.check.Check(ctx, req)
			answers[i] = encodeResult(&res)
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, map[string]any{"results": answers})
}

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
	req, e := body.toRequest()
	if e == nil && req.Hits < 0 {
		e = s.refundRefused(r, "hits")
	}
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

func maxDelay(res *host.Result) time.Duration {
	var d time.Duration
	for _, rr := range res.Results {
		if !rr.Shadow {
			d = max(d, rr.Delay)
		}
	}
	return d
}
