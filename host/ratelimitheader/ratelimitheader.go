// Package ratelimitheader encodes a decision as the RateLimit-Policy and
// RateLimit fields of draft-ietf-httpapi-ratelimit-headers-11, and
// Retry-After on a denial. The HTTP API sets them on its answers and the
// gRPC API returns them to Envoy (response_headers_to_add), so that every
// interface reports limits the same way.
package ratelimitheader

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/ruled-dev/ruled/host"
)

// The canonical forms of the header names Set sets, as http.Header.Set
// would store them.
const (
	// Policy is the RateLimit-Policy field: the limits of the rules.
	Policy = "Ratelimit-Policy"
	// RateLimit is the RateLimit field: what is left of each limit.
	RateLimit = "Ratelimit"
	// RetryAfter is the Retry-After field of a denial, in whole seconds.
	RetryAfter = "Retry-After"
)

// Set sets the RateLimit-Policy and RateLimit fields of res and, on a
// denial, Retry-After.
//
//   - RateLimit-Policy lists every enforcing rule that reports a limit, in
//     rule order: "rule";q=LIMIT, with ;w=WINDOW in whole seconds when the
//     rule has a window.
//   - RateLimit lists those rules' service limits: "rule";r=REMAINING;t=RESET
//     when the request is allowed. When it is denied, it lists only the
//     rules that denied it, with r=0 and t their retry-after, so that no
//     item promises quota that a retry would not find.
//   - Retry-After, on a denial, is the longest retry-after in whole
//     seconds, at least 1: never earlier than the end of any effective
//     window RateLimit reports (the draft's §6).
//
// It runs on every check, so it builds the three values in one buffer and
// sets the canonical names directly: two allocations where Header.Set and
// string concatenation took seven for one rule.
func Set(h http.Header, res *host.Result) {
	var buf [256]byte
	b := buf[:0]
	retryAfter := max(ceilSeconds(res.RetryAfter), 1)
	for i := range res.Results {
		rr := &res.Results[i]
		if !rr.ReportsLimit() {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, rr.Rule) // rule names are [a-z0-9_-]: a valid sf-string
		b = append(b, ";q="...)
		b = strconv.AppendInt(b, rr.Limit, 10)
		if rr.Window > 0 {
			b = append(b, ";w="...)
			b = strconv.AppendInt(b, max(ceilSeconds(rr.Window), 1), 10)
		}
	}
	if len(b) == 0 && res.Allowed {
		return
	}
	policyEnd := len(b)
	for i := range res.Results {
		rr := &res.Results[i]
		if !rr.ReportsLimit() || (!res.Allowed && rr.Allowed) {
			continue
		}
		if len(b) > policyEnd {
			b = append(b, ", "...)
		}
		b = strconv.AppendQuote(b, rr.Rule)
		if rr.Allowed {
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, max(rr.Remaining, 0), 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSeconds(rr.Reset), 10)
			continue
		}
		t := max(ceilSeconds(rr.RetryAfter), 1)
		retryAfter = max(retryAfter, t)
		b = append(b, ";r=0;t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	rateLimitEnd := len(b)
	if !res.Allowed {
		b = strconv.AppendInt(b, retryAfter, 10)
	}
	s := string(b)
	// One backing array for the three values; each header gets a slice
	// capped at its own element, so that an append to one cannot reach
	// the next.
	vals := [...]string{s[:policyEnd], s[policyEnd:rateLimitEnd], s[rateLimitEnd:]}
	all := vals[:]
	if policyEnd > 0 {
		h[Policy] = all[0:1:1]
	}
	if rateLimitEnd > policyEnd {
		h[RateLimit] = all[1:2:2]
	}
	if !res.Allowed {
		h[RetryAfter] = all[2:3:3]
	}
}

// ceilSeconds rounds a duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}
