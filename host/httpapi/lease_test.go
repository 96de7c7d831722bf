package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/internal/redistest"
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
	srv := httptest.NewServer(httpapi.New(httpapi.Options{Checker: e}))
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
		{"/v1/lease/return", `{"returns":[{"request":{},"lease":"!!","unused":1}]}`, "returns[0].lease: not a lease this API gave"},
		{"/v1/lease/return", `{"returns":[{"request":{},"lease":"e30","unused":1}]}`, "returns[0].unused: must be between 0 and the lease's 0 permits"},
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
