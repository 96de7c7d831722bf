package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/ratelimitheader"
)

// Leaser takes and returns client leases (*host.ClientLeases is one), and
// signs and verifies the lease strings with the fleet's lease key.
type Leaser interface {
	Take(ctx context.Context, req *host.LeaseRequest) (host.ClientLease, error)
	// Return gives back the unused units of leases, each lease at most
	// once (host.ErrLeaseReturned for the other returns of it).
	Return(ctx context.Context, rets []*host.LeaseReturn) []host.LeaseReturnResult
	// Sign returns the MAC of a lease string's contents.
	Sign(ctx context.Context, data []byte) ([]byte, error)
	// Verify answers host.ErrLeaseForged when mac is not data's MAC.
	Verify(ctx context.Context, data, mac []byte) error
}

// MaxLeaseReturns bounds the returns in one /v1/lease/return call.
const MaxLeaseReturns = 1000

// MaxLeaseReturnHolds bounds the holds of all the returns in one
// /v1/lease/return call, as MaxBatch bounds a batch's checks: each hold
// returned is one Redis call, so one call makes a bounded number.
const MaxLeaseReturnHolds = MaxBatch

// leaseBody is the JSON body of POST /v1/lease.
type leaseBody struct {
	Request requestBody       `json:"request"`
	Attrs   map[string]string `json:"attrs"`
	Permits int64             `json:"permits"`
}

// leaseAnswer is the JSON body of a lease answer.
type leaseAnswer struct {
	Leasable     bool           `json:"leasable"`
	Reason       string         `json:"reason,omitempty"`
	Permits      int64          `json:"permits"`
	MaxPermits   int64          `json:"max_permits"`
	TTLMicros    int64          `json:"ttl_us"`
	RetryAfterMS int64          `json:"retry_after_ms"`
	DenyFirm     bool           `json:"deny_firm"`
	Lease        string         `json:"lease,omitempty"`
	Results      []resultAnswer `json:"results"`
}

// leaseTicket is what a lease's opaque "lease" string holds: the holds to
// refund, the deadline (this server's clock, Unix microseconds) after
// which no return is taken, and the lease's id, by which it is credited
// at most once.
type leaseTicket struct {
	ID       string           `json:"i"`
	Deadline int64            `json:"d"`
	Permits  int64            `json:"p"`
	Holds    []host.LeaseHold `json:"h"` // by their field names
}

// encode is the lease string of t: its JSON sealed with the fleet's
// lease key (host.Seal).
func (t *leaseTicket) encode(ctx context.Context, l Leaser) (string, error) {
	data, err := json.Marshal(t)
	if err != nil { // strings and integers always marshal
		panic(err)
	}
	return host.Seal(ctx, l, "", data)
}

// ticketClockSlack is how far past now + host.ClientLeaseTTL a lease's
// deadline may be: room for the wall clock to step back, or for another
// instance's clock, between the lease and its return.
const ticketClockSlack = 100 * time.Millisecond

// errBadTicket is the error of a lease string that is not one, or one
// whose contents do not hold together.
var errBadTicket = errors.New("not a lease this API gave")

// decodeTicket reads a lease string: its MAC must verify under the fleet's
// lease key (host.ErrLeaseForged otherwise: a client cannot forge or change
// one), and it must hold together: permits within 0 to
// host.MaxClientLease, each hold's units within 1 to the permits, a
// deadline no later than a lease taken now would have, and a lease id
// when it has holds.
func decodeTicket(ctx context.Context, l Leaser, s string, now time.Time) (*leaseTicket, error) {
	data, err := host.Unseal(ctx, l, "", s)
	if errors.Is(err, host.ErrNotSealed) {
		return nil, fmt.Errorf("%w: %w", errBadTicket, err)
	}
	if err != nil {
		return nil, err
	}
	var t leaseTicket
	if err := json.Unmarshal(data, &t, json.RejectUnknownMembers(true)); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadTicket, err)
	}
	if t.Permits < 0 || t.Permits > host.MaxClientLease {
		return nil, fmt.Errorf("%w: permits %d", errBadTicket, t.Permits)
	}
	for i, h := range t.Holds {
		if h.Taken < 1 || h.Taken > t.Permits {
			return nil, fmt.Errorf("%w: hold %d took %d units of a lease of %d permits", errBadTicket, i, h.Taken, t.Permits)
		}
	}
	if latest := now.Add(host.ClientLeaseTTL + ticketClockSlack).UnixMicro(); t.Deadline > latest {
		return nil, fmt.Errorf("%w: its deadline is %v after now, more than a lease's %v", errBadTicket,
			time.Duration(t.Deadline-now.UnixMicro())*time.Microsecond, host.ClientLeaseTTL)
	}
	// The id by which the lease is credited once; a lease that holds
	// nothing credits nothing, and the API gives it none.
	if len(t.Holds) > 0 && !host.ValidLeaseID(t.ID) {
		return nil, fmt.Errorf("%w: lease id %q", errBadTicket, t.ID)
	}
	return &t, nil
}

// handleLease takes permits for a client to grant in-process:
// {"request", "attrs", "permits"} → 200 {"leasable", "permits", "ttl_us",
// "lease", "results", ...}. A request some matching rule cannot lease
// answers leasable false with the reason; a plugin failure answers 503
// lease_failed, and the client then asks per request.
func (s *Server) handleLease(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	var body leaseBody
	if e := decodeJSON(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	if body.Permits < 1 || body.Permits > host.MaxClientLease {
		writeError(w, newBadRequest("invalid_field", "permits: must be between 1 and %d, got %d", host.MaxClientLease, body.Permits))
		return
	}
	req := &host.LeaseRequest{Request: body.Request.toHost(), Attrs: body.Attrs, Permits: body.Permits}
	l, err := s.leaser.Take(r.Context(), req)
	if err != nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: "lease_failed", Message: err.Error()})
		return
	}
	a := leaseAnswer{Leasable: l.Leasable, Reason: l.Reason, Results: []resultAnswer{}}
	if l.Leasable {
		a.Permits, a.MaxPermits, a.TTLMicros, a.DenyFirm = l.Permits, l.MaxPermits, l.TTL.Microseconds(), l.DenyFirm
		a.RetryAfterMS = ceilMS(l.RetryAfter)
		res := host.Result{Allowed: l.Permits > 0, RetryAfter: l.RetryAfter, Results: l.Results}
		a.Results = encodeResult(&res).Results
		ratelimitheader.Set(w.Header(), &res)
		// A lease the rules deny is still a 200: its retry-after is the
		// body's retry_after_ms, and Retry-After belongs to 429 and 503.
		w.Header().Del(ratelimitheader.RetryAfter)
		if holds := l.Holds(); l.Permits > 0 && len(holds) > 0 {
			// A rule whose surplus could not be refunded at once counted
			// more than the lease's permits; a return gives back at most
			// the permits' unused ones.
			for i := range holds {
				holds[i].Taken = min(holds[i].Taken, l.Permits)
			}
			t := leaseTicket{ID: l.ID, Deadline: start.Add(l.TTL).UnixMicro(), Permits: l.Permits, Holds: holds}
			lease, err := t.encode(r.Context(), s.leaser)
			if err != nil {
				// Take read the lease key before taking, and Sign uses that
				// key while Redis cannot give a newer one: not reached but
				// by a bug, and then the permits stay counted to their
				// window's end.
				writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: "lease_failed", Message: err.Error()})
				return
			}
			a.Lease = lease
		}
	}
	writeJSON(w, http.StatusOK, a)
}

// leaseReturnBody is the JSON body of POST /v1/lease/return.
type leaseReturnBody struct {
	Returns []struct {
		Request requestBody       `json:"request"`
		Attrs   map[string]string `json:"attrs"`
		Lease   string            `json:"lease"`
		Unused  int64             `json:"unused"`
	} `json:"returns"`
}

// handleLeaseReturn gives back unused leased permits:
// {"returns": [{"request", "attrs", "lease", "unused"}]} → 200
// {"returned": UNITS, "late": N, "errors": [...]}. A return too close to
// its lease's deadline is refused and counted as late (host.ErrLateReturn);
// one of a lease returned before, here or to another instance, gives
// nothing back and is listed in errors (host.ErrLeaseReturned). The
// returns that give units back make one Redis round trip to mark their
// leases returned, then one call per hold.
func (s *Server) handleLeaseReturn(w http.ResponseWriter, r *http.Request) {
	var body leaseReturnBody
	if e := decodeJSON(w, r, &body); e != nil {
		writeError(w, e)
		return
	}
	if e := s.refundRefused(r, "lease return"); e != nil {
		writeError(w, e)
		return
	}
	if len(body.Returns) > MaxLeaseReturns {
		writeError(w, newBadRequest("invalid_field", "returns: at most %d per call, got %d", MaxLeaseReturns, len(body.Returns)))
		return
	}
	rets := make([]*host.LeaseReturn, len(body.Returns))
	now := time.Now()
	holds := 0
	for i, b := range body.Returns {
		t, err := decodeTicket(r.Context(), s.leaser, b.Lease, now)
		switch {
		case errors.Is(err, host.ErrLeaseForged):
			writeError(w, &Error{Status: http.StatusForbidden, Code: "lease_forged", Message: fmt.Sprintf("returns[%d].lease: %v", i, err)})
			return
		case errors.Is(err, errBadTicket):
			writeError(w, newBadRequest("invalid_field", "returns[%d].lease: %v", i, err))
			return
		case err != nil: // the key could not be read
			writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: "lease_return_failed", Message: fmt.Sprintf("returns[%d].lease: %v", i, err)})
			return
		}
		if holds += len(t.Holds); holds > MaxLeaseReturnHolds {
			writeError(w, newBadRequest("too_many_holds", "returns: at most %d holds per call (one per rule a lease counted), got more by returns[%d]; return fewer leases per call", MaxLeaseReturnHolds, i))
			return
		}
		if b.Unused < 0 || b.Unused > t.Permits {
			writeError(w, newBadRequest("invalid_field", "returns[%d].unused: must be between 0 and the lease's %d permits, got %d", i, t.Permits, b.Unused))
			return
		}
		rets[i] = &host.LeaseReturn{Request: b.Request.toHost(), Attrs: b.Attrs, Permits: t.Permits, Unused: b.Unused,
			Holds: t.Holds, ID: t.ID, Deadline: time.UnixMicro(t.Deadline)}
	}
	var out struct {
		Returned int64    `json:"returned"`
		Late     int      `json:"late"`
		Errors   []string `json:"errors"`
	}
	out.Errors = []string{}
	// A return of nothing unused gives nothing back: it is not made.
	index := make([]int, 0, len(rets))
	some := rets[:0:0]
	for i, ret := range rets {
		if ret.Unused > 0 {
			index, some = append(index, i), append(some, ret)
		}
	}
	if len(some) > 0 {
		for k, res := range s.leaser.Return(r.Context(), some) {
			out.Returned += res.Returned
			switch {
			case errors.Is(res.Err, host.ErrLateReturn):
				out.Late++
			case res.Err != nil:
				out.Errors = append(out.Errors, fmt.Sprintf("returns[%d]: %v", index[k], res.Err))
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// toHost makes a decoded request body the engine's request.
func (b *requestBody) toHost() host.Request {
	return host.Request{
		IP: b.IP, Method: b.Method, Path: b.Path, Host: b.Host,
		User: b.User, Headers: host.NormalizeHeaders(b.Headers), Query: b.Query,
	}
}
