package grpcapi_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ruled-dev/ruled/host/grpcapi"
)

// TestJSONHandler serves envoy ratelimit's POST /json on a real engine: the
// common form (read by hand) and the forms left to protojson decide alike
// and count against one limit; what is not a request is refused.
func TestJSONHandler(t *testing.T) {
	h := grpcapi.JSONHandler(benchService(t), nil)
	post := func(body string) (int, *rlsv3.RateLimitResponse, string) {
		t.Helper()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/json", strings.NewReader(body)))
		resp := &rlsv3.RateLimitResponse{}
		if w.Code == http.StatusOK || w.Code == http.StatusTooManyRequests {
			if err := protojson.Unmarshal(w.Body.Bytes(), resp); err != nil {
				t.Fatalf("%q: answer %q: %v", body, w.Body, err)
			}
		}
		return w.Code, resp, w.Body.String()
	}
	// The probe key allows 3 an hour: the first call in the common form,
	// the second with an escape, the third with hits_addend, all left but
	// the first to protojson; the fourth is over.
	for i, body := range []string{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"probe","value":"json"}]}]}`,
		`{"domain":"bench","descriptors":[{"entries":[{"key":"\u0070robe","value":"json"}]}]}`,
		`{"domain": "bench", "hits_addend": "1", "descriptors": [{"entries": [{"key": "probe", "value": "json"}]}]}`,
	} {
		code, resp, raw := post(body)
		s := resp.GetStatuses()
		if code != http.StatusOK || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK || len(s) != 1 ||
			s[0].GetLimitRemaining() != uint32(2-i) || s[0].GetCurrentLimit().GetRequestsPerUnit() != 3 ||
			s[0].GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || s[0].GetDurationUntilReset().AsDuration() <= 0 {
			t.Fatalf("call %d: %d %s; want 200, OK, %d remaining of 3 an hour", i+1, code, raw, 2-i)
		}
	}
	code, resp, raw := post(`{"domain":"bench","descriptors":[{"entries":[{"key":"probe","value":"json"}]}]}`)
	if code != http.StatusTooManyRequests || resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT ||
		resp.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("fourth call: %d %s; want 429, OVER_LIMIT", code, raw)
	}
	for _, c := range []struct {
		body string
		want int
		says string
	}{
		{`{"domain":"bench","unknown":1}`, http.StatusBadRequest, "not a RateLimitRequest"},
		{`{"domain":"bench","domain":"bench"}`, http.StatusBadRequest, "not a RateLimitRequest"},
		{`{"domain":"bench"`, http.StatusBadRequest, "not a RateLimitRequest"},
		{`{"domain":"bench","descriptors":[]}`, http.StatusBadRequest, "descriptor"},
		{`{"domain":"` + strings.Repeat("x", grpcapi.MaxJSONBody) + `"}`, http.StatusRequestEntityTooLarge, "over 1 MiB"},
	} {
		if code, _, raw := post(c.body); code != c.want || !strings.Contains(raw, c.says) {
			t.Errorf("%.40q: %d %q; want %d saying %q", c.body, code, raw, c.want, c.says)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/json", nil))
	if w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != http.MethodPost {
		t.Errorf("GET: %d, Allow %q; want 405, POST", w.Code, w.Header().Get("Allow"))
	}
}
