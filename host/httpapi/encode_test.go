package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/sdk"
)

func TestAppendResultMatchesEncodingJSON(t *testing.T) {
	odd := "a\"b\\c\n\r\t\x00\x1f<>&é\u2028\u2029\xff\xfe日本"
	for _, res := range []host.Result{
		{Allowed: true, Results: []host.RuleResult{}},
		{Allowed: false, RetryAfter: 1200*time.Millisecond + 1, Results: []host.RuleResult{
			{Rule: "r1", Subject: "203.0.113.7", Plugin: "fixedwindow", Decision: sdk.Decision{Allowed: true, Granted: 3, Limit: 10, Remaining: 7,
				Reset: 41 * time.Second, Delay: time.Microsecond}},
			{Rule: "r2", Subject: odd, Plugin: "p", Shadow: true, Degraded: host.DegradedLocal, Err: errors.New(odd),
				Decision: sdk.Decision{Remaining: -1, RetryAfter: 999 * time.Microsecond}},
		}},
	} {
		want, err := json.Marshal(encodeResult(&res))
		if err != nil {
			t.Fatal(err)
		}
		if got := appendResult(nil, &res); string(got) != string(want)+"\n" {
			t.Fatalf("appendResult:\n%s\nencoding/json:\n%s", got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	f.Add("plain")
	f.Add("\x00\"\\<>&\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}

// setRateLimitHeadersWithSet is SetRateLimitHeaders as it was written with
// http.Header.Set: the reference for the allocation-saving one.
func setRateLimitHeadersWithSet(h http.Header, res *host.Result) {
	if p, ok := res.Policy(); ok {
		name := strconv.Quote(p.Rule)
		policy := name + ";q=" + strconv.FormatInt(p.Limit, 10)
		if p.Window > 0 {
			policy += ";w=" + strconv.FormatInt(max(ceilSeconds(p.Window), 1), 10)
		}
		h.Set("RateLimit-Policy", policy)
		h.Set("RateLimit", name+";r="+strconv.FormatInt(max(p.Remaining, 0), 10)+";t="+strconv.FormatInt(ceilSeconds(p.Reset), 10))
	}
	if !res.Allowed {
		h.Set("Retry-After", strconv.FormatInt(max(ceilSeconds(res.RetryAfter), 1), 10))
	}
}

func TestSetRateLimitHeadersMatchesHeaderSet(t *testing.T) {
	long := strings.Repeat("r", 200) + `"\`
	for i, res := range []host.Result{
		{Allowed: true},
		{Allowed: false},
		{Allowed: false, RetryAfter: 1500 * time.Millisecond},
		{Allowed: true, Results: []host.RuleResult{{Rule: "shadowed", Shadow: true, Decision: sdk.Decision{Limit: 5}}}},
		{Allowed: true, Results: []host.RuleResult{{Rule: "per-ip", Decision: sdk.Decision{Allowed: true, Limit: 100, Remaining: 42,
			Window: time.Minute, Reset: 30*time.Second + 1}}}},
		{Allowed: true, Results: []host.RuleResult{{Rule: "no-window", Decision: sdk.Decision{Allowed: true, Limit: 1, Remaining: -3}}}},
		{Allowed: false, RetryAfter: 0, Results: []host.RuleResult{{Rule: long, Decision: sdk.Decision{Limit: 1 << 62,
			Remaining: 1 << 62, Window: time.Millisecond, Reset: 1<<63 - 1, RetryAfter: time.Hour}}}},
		{Allowed: false, RetryAfter: 1200 * time.Millisecond, Results: []host.RuleResult{
			{Rule: "a", Decision: sdk.Decision{Allowed: true, Limit: 10, Remaining: 3, Window: time.Second}},
			{Rule: "b", Decision: sdk.Decision{Allowed: false, Limit: 5, Window: 10 * time.Second, Reset: 1200 * time.Millisecond,
				RetryAfter: 1200 * time.Millisecond}}}},
	} {
		got, want := http.Header{"X-Kept": {"1"}, "Ratelimit": {"old"}}, http.Header{"X-Kept": {"1"}, "Ratelimit": {"old"}}
		SetRateLimitHeaders(got, &res)
		setRateLimitHeadersWithSet(want, &res)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("result %d: headers\n%v\nwant\n%v", i, got, want)
		}
	}
}
