package httpapi

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/ruled-dev/ruled/host"
)

// MaxBatch bounds the checks in one /v1/check/batch call.
const MaxBatch = 1000

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
		req, e := s.checkRequest(r, &body.Checks[i])
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
