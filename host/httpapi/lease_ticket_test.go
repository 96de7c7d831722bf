package httpapi

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/sdk"
)

// fixedLeaser answers every lease with lease.
type fixedLeaser struct {
	recorder
	lease host.ClientLease
}

func (f *fixedLeaser) Take(context.Context, *host.LeaseRequest) (host.ClientLease, error) {
	return f.lease, nil
}

func (f *fixedLeaser) Return(_ context.Context, rets []*host.LeaseReturn) []host.LeaseReturnResult {
	return make([]host.LeaseReturnResult, len(rets))
}

// testLeaseKey signs the lease strings of the fakes.
var testLeaseKey = []byte("0123456789abcdef0123456789abcdef")

// Sign signs with testLeaseKey.
func (f *fixedLeaser) Sign(_ context.Context, data []byte) ([]byte, error) {
	m := hmac.New(sha256.New, testLeaseKey)
	m.Write(data)
	return m.Sum(nil), nil
}

// Verify verifies with testLeaseKey.
func (f *fixedLeaser) Verify(ctx context.Context, data, mac []byte) error {
	want, _ := f.Sign(ctx, data)
	if !hmac.Equal(mac, want) {
		return host.ErrLeaseForged
	}
	return nil
}

// A rule whose surplus could not be refunded counted more than the lease's
// permits: the lease string holds at most the permits for it, so that the
// API takes its own lease back and a return refunds at most what went
// unused.
func TestLeaseTicketHoldsAtMostThePermits(t *testing.T) {
	l := &fixedLeaser{lease: host.ClientLease{ID: host.NewLeaseID(), Leasable: true, Permits: 5, MaxPermits: 10, TTL: time.Second,
		Results: []host.RuleResult{
			{Rule: "a", Subject: "s", Plugin: "fixedwindow", Decision: sdk.Decision{Allowed: true, Granted: 8, Limit: 100, Remaining: 92}},
			{Rule: "b", Subject: "s", Plugin: "fixedwindow", Decision: sdk.Decision{Allowed: true, Granted: 5, Limit: 5, Remaining: 0}},
		}}}
	w := httptest.NewRecorder()
	New(Options{Checker: l, Leases: l}).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/lease", strings.NewReader(`{"permits": 10}`)))
	var a leaseAnswer
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil || w.Code != http.StatusOK || a.Lease == "" {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	tk, err := decodeTicket(context.Background(), l, a.Lease, time.Now())
	if err != nil {
		t.Fatalf("the API refuses its own lease: %v", err)
	}
	if tk.Permits != 5 || len(tk.Holds) != 2 || tk.Holds[0].Taken != 5 || tk.Holds[1].Taken != 5 {
		t.Fatalf("ticket %+v, want 5 permits and holds of 5", tk)
	}
}

// The deadline of a lease string may be up to a lease's TTL ahead, with
// the clock slack, and no more.
func TestLeaseTicketDeadline(t *testing.T) {
	now := time.Now()
	ctx, l := context.Background(), &fixedLeaser{}
	for _, tc := range []struct {
		ahead time.Duration
		ok    bool
	}{
		{-time.Hour, true}, // long past: a late return, refused as late, not as bad input
		{host.ClientLeaseTTL, true},
		{host.ClientLeaseTTL + ticketClockSlack, true},
		{host.ClientLeaseTTL + ticketClockSlack + time.Millisecond, false},
	} {
		tk := leaseTicket{ID: host.NewLeaseID(), Deadline: now.Add(tc.ahead).UnixMicro(), Permits: 3, Holds: []host.LeaseHold{{Rule: "r", Subject: "s", Taken: 3}}}
		s, err := tk.encode(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeTicket(ctx, l, s, now); (err == nil) != tc.ok {
			t.Errorf("deadline %v ahead: err %v, want ok %v", tc.ahead, err, tc.ok)
		}
	}
}

// A lease string whose contents changed, or that was never signed, is
// refused as forged: its numbers cannot be raised.
func TestLeaseTicketChangedIsForged(t *testing.T) {
	ctx, l := context.Background(), &fixedLeaser{}
	tk := leaseTicket{ID: host.NewLeaseID(), Deadline: time.Now().Add(time.Second).UnixMicro(), Permits: 3, Holds: []host.LeaseHold{{Rule: "r", Subject: "s", Taken: 3}}}
	s, err := tk.encode(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	body, sig, _ := strings.Cut(s, ".")
	data, _ := base64.RawURLEncoding.DecodeString(body)
	raised := base64.RawURLEncoding.EncodeToString([]byte(strings.ReplaceAll(string(data), "3", "9")))
	for name, forged := range map[string]string{"raised": raised + "." + sig, "unsigned": raised, "no mac": raised + "."} {
		if _, err := decodeTicket(ctx, l, forged, time.Now()); !errors.Is(err, host.ErrLeaseForged) {
			t.Errorf("%s: %v, want ErrLeaseForged", name, err)
		}
	}
}
