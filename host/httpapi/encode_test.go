package httpapi

import (
	"encoding/json"
	"errors"
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
			{Rule: "r3", Subject: "k", Plugin: "concurrency", Releases: true, Decision: sdk.Decision{Allowed: true, Granted: 1, Limit: 4, Remaining: 3}},
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
