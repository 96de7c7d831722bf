package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

const leaseRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
    lease: 40
  - name: unleased
    when: request.path == "/unleased"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 1h}
`

func newLeaseFixture(t *testing.T, timeout time.Duration) *fixture {
	t.Helper()
	rs := redistest.Start(t)
	e, path := newTestEngine(t, rs, timeout, leaseRules, builtin.All())
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e, Leases: e.ClientLeases()}))
	t.Cleanup(srv.Close)
	return &fixture{redis: rs, srv: srv, engine: e, rules: path}
}

type leaseReply struct {
	Leasable     bool   `json:"leasable"`
	Reason       string `json:"reason"`
	Permits      int64  `json:"permits"`
	TTLMicros    int64  `json:"ttl_us"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DenyFirm     bool   `json:"deny_firm"`
	Lease        string `json:"lease"`
	Results      []struct {
		Rule      string `json:"rule"`
		Granted   int64  `json:"granted"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
	} `json:"results"`
}

func (f *fixture) lease(t *testing.T, body string) leaseReply {
	t.Helper()
	resp, text := f.do(t, http.MethodPost, "/v1/lease", "", body, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("lease: %d %s", resp.StatusCode, text)
	}
	var r leaseReply
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) remaining(t *testing.T, ip string) int64 {
	t.Helper()
	_, text := f.do(t, http.MethodPost, "/v1/check", "", `{"request":{"ip":"`+ip+`"},"hits":0}`, nil)
	var a struct {
		Results []struct {
			Remaining int64 `json:"remaining"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(text), &a); err != nil || len(a.Results) != 1 {
		t.Fatalf("peek: %s", text)
	}
	return a.Results[0].Remaining
}

func TestLeaseAndReturnOverHTTP(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	l := f.lease(t, `{"request":{"ip":"192.0.2.10"},"permits":1000}`)
	if !l.Leasable || l.Permits != 40 || l.Lease == "" || l.TTLMicros <= 0 || l.TTLMicros > 1e6 {
		t.Fatalf("lease = %+v, want 40 permits (the rule's lease size) for at most 1 s", l)
	}
	if len(l.Results) != 1 || l.Results[0].Granted != 40 || l.Results[0].Limit != 100 || l.Results[0].Remaining != 60 {
		t.Fatalf("results = %+v", l.Results)
	}
	ret := fmt.Sprintf(`{"returns":[{"request":{"ip":"192.0.2.10"},"lease":%q,"unused":25}]}`, l.Lease)
	resp, text := f.do(t, http.MethodPost, "/v1/lease/return", "", ret, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"returned":25`) || !strings.Contains(text, `"late":0`) {
		t.Fatalf("return: %d %s", resp.StatusCode, text)
	}
	if got := f.remaining(t, "192.0.2.10"); got != 85 {
		t.Fatalf("remaining %d after 15 of 40 leased were used, want 85", got)
	}
}

func TestLeaseRefusedNamesTheRule(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	l := f.lease(t, `{"request":{"ip":"192.0.2.11","path":"/unleased"},"permits":10}`)
	if l.Leasable || !strings.Contains(l.Reason, "unleased") || l.Permits != 0 || l.Lease != "" {
		t.Fatalf("lease = %+v, want refused, naming rule unleased", l)
	}
}

func TestLeaseBadInputIs400(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/lease", `{"request":{"ip":"192.0.2.12"}}`, "permits: must be between 1 and"},
		{"/v1/lease", `{"request":{"ip":"192.0.2.12"},"permits":2000000}`, "permits: must be between 1 and"},
		{"/v1/lease", `{"request":{"ip":"192.0.2.12"},"permits":"5"}`, "permits"},
		{"/v1/lease/return", `{"returns":[{"request":{},"lease":"!!.!!","unused":1}]}`, "returns[0].lease: not a lease this API gave"},
		{"/v1/lease/return", fmt.Sprintf(`{"returns":[{"request":{},"lease":%q,"unused":1}]}`, signLease(t, f.engine, "{}")), "returns[0].unused: must be between 0 and the lease's 0 permits"},
	} {
		resp, text := f.do(t, http.MethodPost, tc.path, "", tc.body, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text, tc.want) {
			t.Errorf("%s %s: %d %s, want 400 with %q", tc.path, tc.body, resp.StatusCode, text, tc.want)
		}
	}
}

// A return that comes within 100 ms of its lease's deadline is refused:
// the window may have moved on by the time Redis runs it, and the units
// would be credited to the next one.
func TestLateLeaseReturnIsRefused(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	l := f.lease(t, `{"request":{"ip":"192.0.2.13"},"permits":10}`)
	if l.Permits != 10 {
		t.Fatalf("lease %+v", l)
	}
	time.Sleep(time.Duration(l.TTLMicros)*time.Microsecond - 90*time.Millisecond)
	ret := fmt.Sprintf(`{"returns":[{"request":{"ip":"192.0.2.13"},"lease":%q,"unused":10}]}`, l.Lease)
	_, text := f.do(t, http.MethodPost, "/v1/lease/return", "", ret, nil)
	if !strings.Contains(text, `"returned":0`) || !strings.Contains(text, `"late":1`) {
		t.Fatalf("late return answered %s, want refused as late", text)
	}
	if got := f.remaining(t, "192.0.2.13"); got != 90 {
		t.Fatalf("remaining %d, want 90: a late return gives nothing back", got)
	}
}

// A lease answer carries RateLimit-Policy and RateLimit (the Go client
// keeps the policy for its leased answers) but never Retry-After: it is a
// 200 even when the rules deny, with the retry-after in its body.
func TestLeaseAnswerHeaders(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	body := `{"request":{"ip":"192.0.2.14"},"permits":40}`
	for i, want := range []struct {
		permits   int64
		rateLimit string
	}{
		{40, `"per-ip";r=60;t=`},
		{40, `"per-ip";r=20;t=`},
		{20, `"per-ip";r=0;t=`},
		{0, `"per-ip";r=0;t=`}, // denied: the denying rule, t its retry-after
	} {
		resp, text := f.do(t, http.MethodPost, "/v1/lease", "", body, nil)
		var l leaseReply
		if err := json.Unmarshal([]byte(text), &l); err != nil || resp.StatusCode != http.StatusOK || l.Permits != want.permits {
			t.Fatalf("lease %d: %d %s, want 200 with %d permits", i, resp.StatusCode, text, want.permits)
		}
		if got := resp.Header.Get("RateLimit-Policy"); got != `"per-ip";q=100;w=3600` {
			t.Errorf("lease %d: RateLimit-Policy %q", i, got)
		}
		if got := resp.Header.Get("RateLimit"); !strings.HasPrefix(got, want.rateLimit) {
			t.Errorf("lease %d: RateLimit %q, want %s...", i, got, want.rateLimit)
		}
		if got := resp.Header.Values("Retry-After"); len(got) != 0 {
			t.Errorf("lease %d: Retry-After %q on a 200 (retry_after_ms is %d)", i, got, l.RetryAfterMS)
		}
		if want.permits == 0 && l.RetryAfterMS <= 0 {
			t.Errorf("lease %d: denied with retry_after_ms %d", i, l.RetryAfterMS)
		}
	}
}

// signLease is a lease string of data signed with e's lease key.
func signLease(t *testing.T, e *host.Engine, data string) string {
	t.Helper()
	mac, err := e.ClientLeases().Sign(context.Background(), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(data)) + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// forgeLease writes a lease string as this API encodes them, signed with
// e's lease key, or unsigned when e is nil.
func forgeLease(t *testing.T, e *host.Engine, deadline time.Time, permits int64, taken ...int64) string {
	t.Helper()
	type hold struct {
		Rule, Subject string
		Taken         int64
	}
	tk := struct {
		I string `json:"i"`
		D int64  `json:"d"`
		P int64  `json:"p"`
		H []hold `json:"h"`
	}{I: host.NewLeaseID(), D: deadline.UnixMicro(), P: permits}
	for _, n := range taken {
		tk.H = append(tk.H, hold{Rule: "per-ip", Subject: "192.0.2.15", Taken: n})
	}
	b, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	if e == nil {
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return signLease(t, e, string(b))
}

// A lease string not signed with the fleet's key, or changed since, is
// refused with 403 lease_forged and gives nothing back.
func TestForgedLeaseIsRefused(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	l := f.lease(t, `{"request":{"ip":"192.0.2.15"},"permits":10}`)
	if l.Permits != 10 {
		t.Fatalf("lease %+v", l)
	}
	body, mac, _ := strings.Cut(l.Lease, ".")
	data, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	raised := base64.RawURLEncoding.EncodeToString([]byte(strings.ReplaceAll(string(data), ":10", ":40")))
	soon := time.Now().Add(500 * time.Millisecond)
	for _, tc := range []struct{ name, lease string }{
		{"numbers raised", raised + "." + mac},
		{"unsigned", forgeLease(t, nil, soon, 10, 10)},
		{"another key", forgeLease(t, f.otherEngine(t), soon, 10, 10)},
	} {
		ret := fmt.Sprintf(`{"returns":[{"request":{"ip":"192.0.2.15"},"lease":%q,"unused":10}]}`, tc.lease)
		resp, text := f.do(t, http.MethodPost, "/v1/lease/return", "", ret, nil)
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(text, `"lease_forged"`) || !strings.Contains(text, "not a lease this fleet gave") {
			t.Errorf("%s: %d %s, want 403 lease_forged", tc.name, resp.StatusCode, text)
		}
	}
	if got := f.remaining(t, "192.0.2.15"); got != 90 {
		t.Fatalf("remaining %d after the forged returns, want 90: nothing given back", got)
	}
}

// A signed lease string that does not hold together is refused with 400
// and gives nothing back: holds beyond the lease's permits, or a deadline
// no lease taken now could have (defence in depth: the API never signs
// one).
func TestInconsistentLeaseIsRefused(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	if l := f.lease(t, `{"request":{"ip":"192.0.2.15"},"permits":10}`); l.Permits != 10 {
		t.Fatalf("lease %+v", l)
	}
	e := f.engine
	soon := time.Now().Add(500 * time.Millisecond)
	for _, tc := range []struct{ name, lease, want string }{
		{"hold over the permits", forgeLease(t, e, soon, 10, 10, 90), "hold 1 took 90 units of a lease of 10 permits"},
		{"empty hold", forgeLease(t, e, soon, 10, 0), "hold 0 took 0 units"},
		{"negative hold", forgeLease(t, e, soon, 10, -5), "hold 0 took -5 units"},
		{"deadline an hour on", forgeLease(t, e, time.Now().Add(time.Hour), 10, 10), "its deadline is"},
	} {
		ret := fmt.Sprintf(`{"returns":[{"request":{"ip":"192.0.2.15"},"lease":%q,"unused":10}]}`, tc.lease)
		resp, text := f.do(t, http.MethodPost, "/v1/lease/return", "", ret, nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text, "returns[0].lease: not a lease this API gave: "+tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.name, resp.StatusCode, text, tc.want)
		}
	}
	if got := f.remaining(t, "192.0.2.15"); got != 90 {
		t.Fatalf("remaining %d after the forged returns, want 90: nothing given back", got)
	}
}

// otherEngine is an engine of another fleet (its own Redis, so its own
// lease key).
func (f *fixture) otherEngine(t *testing.T) *host.Engine {
	t.Helper()
	e, _ := newTestEngine(t, redistest.Start(t), time.Second, leaseRules, builtin.All())
	return e
}

// A return call holding more than MaxLeaseReturnHolds holds in all is
// refused with 400 too_many_holds before any Redis call: one call makes a
// bounded number of refunds.
func TestLeaseReturnHoldsAreBounded(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	if l := f.lease(t, `{"request":{"ip":"192.0.2.15"},"permits":10}`); l.Permits != 10 {
		t.Fatalf("lease %+v", l)
	}
	soon := time.Now().Add(500 * time.Millisecond)
	taken := make([]int64, httpapi.MaxLeaseReturnHolds/2+1)
	for i := range taken {
		taken[i] = 1
	}
	half := forgeLease(t, f.engine, soon, 10, taken...)
	ret := fmt.Sprintf(`{"returns":[{"request":{"ip":"192.0.2.15"},"lease":%q,"unused":10},{"request":{"ip":"192.0.2.15"},"lease":%q,"unused":10}]}`, half, half)
	resp, text := f.do(t, http.MethodPost, "/v1/lease/return", "", ret, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(text, `"too_many_holds"`) || !strings.Contains(text, "returns[1]") {
		t.Fatalf("%d holds in one call: %d %s, want 400 too_many_holds naming returns[1]", 2*len(taken), resp.StatusCode, text)
	}
	if got := f.remaining(t, "192.0.2.15"); got != 90 {
		t.Fatalf("remaining %d after the refused return, want 90: nothing given back", got)
	}
}

// A lease is credited once: returned again, in the same call or a later
// one, it gives nothing back and the return is listed in errors.
func TestLeaseReturnedTwiceCreditsOnce(t *testing.T) {
	f := newLeaseFixture(t, time.Second)
	l := f.lease(t, `{"request":{"ip":"192.0.2.16"},"permits":40}`)
	if l.Permits != 40 {
		t.Fatalf("lease %+v", l)
	}
	one := fmt.Sprintf(`{"request":{"ip":"192.0.2.16"},"lease":%q,"unused":30}`, l.Lease)
	resp, text := f.do(t, http.MethodPost, "/v1/lease/return", "", `{"returns":[`+one+`,`+one+`]}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"returned":30`) || !strings.Contains(text, `returns[1]: lease return: this lease was returned before`) {
		t.Fatalf("the lease twice in one call: %d %s, want 30 returned and returns[1] refused", resp.StatusCode, text)
	}
	resp, text = f.do(t, http.MethodPost, "/v1/lease/return", "", `{"returns":[`+one+`]}`, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(text, `"returned":0`) || !strings.Contains(text, `returns[0]: lease return: this lease was returned before`) {
		t.Fatalf("the lease again: %d %s, want nothing returned and returns[0] refused", resp.StatusCode, text)
	}
	if got := f.remaining(t, "192.0.2.16"); got != 100-40+30 {
		t.Fatalf("remaining %d, want %d: the lease's 30 unused came back once", got, 100-40+30)
	}
}
