package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
)

// MaxHits bounds the absolute value of hits in a check.
const MaxHits = 1_000_000_000

// maxDedupID bounds the length of a dedup id.
const maxDedupID = 256

// checkBody is the JSON body of POST /v1/check, as encoding/json decodes it
// (decodeJSON) for /v1/check/batch and /v1/acquire; /v1/check itself has
// decodeCheck (checkjson.go), held to the same results.
type checkBody struct {
	Request    requestBody       `json:"request"`
	Attrs      map[string]string `json:"attrs"`
	Hits       *int64            `json:"hits"`
	DedupID    string            `json:"dedup_id"`
	BestEffort bool              `json:"best_effort"`
}

type requestBody struct {
	IP      string            `json:"ip"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Host    string            `json:"host"`
	User    string            `json:"user"`
	Headers map[string]string `json:"headers"`
	Query   map[string]string `json:"query"`
}

func decodeJSON(w http.ResponseWriter, r *http.Request, v any) *Error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return jsonError(err)
		}
		return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "unexpected data after the JSON object"}
	}
	return nil
}

func jsonError(err error) *Error {
	bad := func(code, format string, args ...any) *Error {
		return &Error{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
	}
	var maxErr *http.MaxBytesError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return bad("body_too_large", "request body is larger than %d bytes", maxErr.Limit)
	case errors.Is(err, io.EOF):
		return bad("invalid_json", "request body is empty; want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad("invalid_json", "request body ends in the middle of the JSON object")
	case errors.As(err, &syntaxErr):
		return bad("invalid_json", "invalid JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return bad("invalid_field", "%s: want %s, got %s", field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return bad("unknown_field", "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return bad("invalid_json", "%v", err)
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int64", "int":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	default:
		return goKind
	}
}

// toRequest validates a body decoded by decodeJSON (/v1/check/batch,
// /v1/acquire) and makes it a request. decodeCheck does the same for
// /v1/check.
func (b *checkBody) toRequest() (*host.CheckRequest, *Error) {
	hits := int64(1)
	if b.Hits != nil {
		hits = *b.Hits
	}
	if e := checkLimits(hits, b.DedupID); e != nil {
		return nil, e
	}
	req := &host.CheckRequest{
		Request: host.Request{
			IP: b.Request.IP, Method: b.Request.Method, Path: b.Request.Path, Host: b.Request.Host,
			User: b.Request.User, Headers: host.NormalizeHeaders(b.Request.Headers), Query: b.Request.Query,
		},
		Attrs:      b.Attrs,
		Hits:       hits,
		DedupID:    b.DedupID,
		BestEffort: b.BestEffort,
	}
	return req, nil
}

// checkLimits refuses hits and dedup ids out of bounds.
func checkLimits(hits int64, dedupID string) *Error {
	bad := func(format string, args ...any) *Error {
		return &Error{Status: http.StatusBadRequest, Code: "invalid_field", Message: fmt.Sprintf(format, args...)}
	}
	if hits < -MaxHits || hits > MaxHits {
		return bad("hits: must be between %d and %d, got %d", -MaxHits, MaxHits, hits)
	}
	if len(dedupID) > maxDedupID {
		return bad("dedup_id: at most %d bytes, got %d", maxDedupID, len(dedupID))
	}
	return nil
}

// checkAnswer is the JSON body of a check answer.
type checkAnswer struct {
	Allowed      bool           `json:"allowed"`
	RetryAfterMS int64          `json:"retry_after_ms"`
	Results      []resultAnswer `json:"results"`
	// Error is set, in a batch, on a check a plugin refused as bad input
	// (a single check answers 400 instead).
	Error *Error `json:"error,omitempty"`
}

type resultAnswer struct {
	Rule         string `json:"rule"`
	Subject      string `json:"subject"`
	Plugin       string `json:"plugin"`
	Allowed      bool   `json:"allowed"`
	Granted      int64  `json:"granted"`
	Limit        int64  `json:"limit"`
	Remaining    int64  `json:"remaining"`
	ResetMS      int64  `json:"reset_ms"`
	RetryAfterMS int64  `json:"retry_after_ms"`
	DelayMS      int64  `json:"delay_ms"`
	Shadow       bool   `json:"shadow"`
	Degraded     string `json:"degraded"`
	Error        string `json:"error,omitempty"`
}

func encodeResult(res *host.Result) *checkAnswer {
	a := &checkAnswer{Allowed: res.Allowed, RetryAfterMS: ceilMS(res.RetryAfter), Results: make([]resultAnswer, len(res.Results))}
	for i, rr := range res.Results {
		ra := resultAnswer{
			Rule: rr.Rule, Subject: rr.Subject, Plugin: rr.Plugin, Allowed: rr.Allowed,
			Granted: rr.Granted, Limit: rr.Limit, Remaining: rr.Remaining,
			ResetMS: ceilMS(rr.Reset), RetryAfterMS: ceilMS(rr.RetryAfter), DelayMS: ceilMS(rr.Delay),
			Shadow: rr.Shadow, Degraded: string(rr.Degraded),
		}
		if rr.Err != nil {
			ra.Error = rr.Err.Error()
		}
		a.Results[i] = ra
	}
	if res.BadRequest != nil {
		a.Error = badRequest(res)
	}
	return a
}

// ceilMS rounds a duration up to whole milliseconds: a client told to wait
// must never be told too little.
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// ceilSeconds rounds a duration up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64(math.Ceil(d.Seconds()))
}

// The canonical forms of the header names SetRateLimitHeaders sets, as
// http.Header.Set would store them.
const (
	headerRateLimitPolicy = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerRetryAfter      = "Retry-After"
)

// SetRateLimitHeaders sets the RateLimit-Policy and RateLimit fields of
// draft-ietf-httpapi-ratelimit-headers-11 and, on a denial, Retry-After.
// The gRPC API uses it too, so that every interface reports limits the
// same way.
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
func SetRateLimitHeaders(h http.Header, res *host.Result) {
	var buf [256]byte
	b := buf[:0]
	retryAfter := max(ceilSeconds(res.RetryAfter), 1)
	for i := range res.Results {
		rr := &res.Results[i]
		if !reportsLimit(rr) {
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
		if !reportsLimit(rr) || (!res.Allowed && rr.Allowed) {
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
		h[headerRateLimitPolicy] = all[0:1:1]
	}
	if rateLimitEnd > policyEnd {
		h[headerRateLimit] = all[1:2:2]
	}
	if !res.Allowed {
		h[headerRetryAfter] = all[2:3:3]
	}
}

// reportsLimit reports whether a rule's result appears in the RateLimit
// fields: an enforcing rule (not shadow) whose plugin reported a limit.
func reportsLimit(rr *host.RuleResult) bool { return !rr.Shadow && rr.Limit > 0 }
