package httpapi

import (
	"context"
	"net/http"

	"github.com/ruled-dev/ruled/host"
)

// Holder releases and renews the slots of in-flight limits, the grants of
// rules whose plugins declare releases (*host.Engine is one).
type Holder interface {
	// Release frees the slots req's lease id holds in the rules req
	// matches.
	Release(ctx context.Context, req *host.CheckRequest) host.Result
	// Renew acquires those slots again.
	Renew(ctx context.Context, req *host.CheckRequest) host.Result
}

// releaseAnswer is the JSON body of a release answer.
type releaseAnswer struct {
	// Released is the number of rules whose slot the release freed.
	Released int64          `json:"released"`
	Results  []resultAnswer `json:"results"`
}

// holdRequest reads the body of /v1/release and /v1/renew: a check body
// with a lease_id (or, without one, a dedup_id: the id the slots were
// acquired with) and without hits (each holding rule is asked one hit).
func holdRequest(w http.ResponseWriter, r *http.Request) (*host.CheckRequest, *Error) {
	var body checkBody
	if e := decodeJSON(w, r, &body); e != nil {
		return nil, e
	}
	if body.Hits != nil {
		return nil, newBadRequest("invalid_field", "hits: %s takes none; each rule holding a slot is asked one", r.URL.Path)
	}
	if body.LeaseID == "" && body.DedupID == "" {
		return nil, newBadRequest("invalid_field", "lease_id: required: the id the slots were acquired with")
	}
	return body.toRequest()
}

// handleRelease frees the slots a lease id holds: {"request", "attrs",
// "lease_id"} → 200 {"released", "results"}, the results of the rules
// whose plugins hold slots (no other rule is asked). A release gives
// quota back, so it follows the refund policy (403 refunds_refused).
func (s *Server) handleRelease(w http.ResponseWriter, r *http.Request) {
	req, e := holdRequest(w, r)
	if e == nil {
		e = s.refundRefused(r, "release")
	}
	if e != nil {
		writeError(w, e)
		return
	}
	res := s.holds.Release(r.Context(), req)
	if res.BadRequest != nil {
		writeError(w, badRequest(&res))
		return
	}
	a := releaseAnswer{Results: encodeResult(&res).Results}
	for _, rr := range res.Results {
		if rr.Granted < 0 {
			a.Released++
		}
	}
	writeJSON(w, http.StatusOK, a)
}

// handleRenew acquires again the slots a lease id holds, for a request
// that runs longer than their leases last: the body is /v1/release's, the
// answer a check's (200, 429 when a slot could not be kept, 503 when a
// rule failed closed) with the results of the rules that hold slots.
func (s *Server) handleRenew(w http.ResponseWriter, r *http.Request) {
	req, e := holdRequest(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	res := s.holds.Renew(r.Context(), req)
	s.respondCheck(w, &res)
}
