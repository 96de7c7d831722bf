package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/ruled-dev/ruled/host"
)

// MaxHits bounds the absolute value of hits in a check.
const MaxHits = host.MaxHits

// maxDedupID bounds the length of a dedup id.
const maxDedupID = host.MaxDedupID

// checkBody is the JSON body of POST /v1/check, and of each check of
// /v1/check/batch and /v1/acquire.
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

// decodeCheck reads and validates a check body. Every failure is a 400 with
// a code and a message that names the problem.
func decodeCheck(w http.ResponseWriter, r *http.Request) (*host.CheckRequest, *Error) {
	var b checkBody
	if e := decodeJSON(w, r, &b); e != nil {
		return nil, e
	}
	return b.toRequest()
}

// bodyBuffers hold request bodies while they are decoded: a check's body is
// read whole, then decoded, and its buffer serves the next request.
var bodyBuffers = sync.Pool{New: func() any { return bytes.NewBuffer(make([]byte, 0, 2048)) }}

// maxPooledBody bounds the buffers bodyBuffers keeps: a rare large body
// does not pin its memory.
const maxPooledBody = 64 << 10

// decodeJSON reads a body of at most MaxBodyBytes into v with
// encoding/json/v2's semantics (github.com/go-json-experiment/json, the
// standard library's from Go 1.27): one JSON value, member names matched
// exactly, no unknown or duplicate members, valid UTF-8, nothing after it.
// The strictness is on purpose: a body that two JSON parsers could read
// differently (duplicate "hits", "HITS" beside "hits") is refused rather
// than guessed at.
//
// It replaced a hand-written parser of the check body: measured end to end
// (docs/performance.md), it costs 1 to 6 % more of ruled's CPU per decision,
// under the 5 % that would have kept 870 lines of parser; encoding/json
// (v1) cost 9 to 11 %.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) *Error {
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			bodyBuffers.Put(buf)
		}
	}()
	buf.Reset()
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, MaxBodyBytes)); err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return newBadRequest("body_too_large", "request body is larger than %d bytes", maxErr.Limit)
		}
		return newBadRequest("invalid_json", "reading the request body: %v", err)
	}
	if buf.Len() == 0 {
		return newBadRequest("invalid_json", "request body is empty; want a JSON object")
	}
	// Unmarshal, not a Decoder of our own: it reuses its decoders, and
	// refuses data after the value itself.
	if err := json.Unmarshal(buf.Bytes(), v, json.RejectUnknownMembers(true)); err != nil {
		return jsonError(err)
	}
	return nil
}

// newBadRequest is a 400 with code and a formatted message.
func newBadRequest(code, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Message: fmt.Sprintf(format, args...)}
}

// jsonError explains a failed decode: where, and what was wrong.
func jsonError(err error) *Error {
	var syntaxErr *jsontext.SyntacticError
	var semErr *json.SemanticError
	switch {
	case errors.As(err, &syntaxErr):
		switch {
		case errors.Is(syntaxErr.Err, io.ErrUnexpectedEOF):
			return newBadRequest("invalid_json", "request body ends in the middle of the JSON object")
		case errors.Is(syntaxErr.Err, jsontext.ErrDuplicateName):
			return newBadRequest("invalid_json", "duplicate field %s", fieldPath(syntaxErr.JSONPointer))
		}
		return newBadRequest("invalid_json", "invalid JSON at byte %d%s: %v", syntaxErr.ByteOffset, within(syntaxErr.JSONPointer), syntaxErr.Err)
	case errors.As(err, &semErr) && errors.Is(semErr.Err, json.ErrUnknownName):
		return newBadRequest("unknown_field", "unknown field %s", fieldPath(semErr.JSONPointer))
	case errors.As(err, &semErr):
		field := "body"
		if semErr.JSONPointer != "" {
			field = strings.Trim(fieldPath(semErr.JSONPointer), `"`)
		}
		got := jsonKindName(semErr.JSONKind)
		if semErr.JSONValue != nil {
			got += " " + string(semErr.JSONValue)
		}
		return newBadRequest("invalid_field", "%s: want %s, got %s", field, goKindName(semErr.GoType), got)
	default:
		return newBadRequest("invalid_json", "%v", err)
	}
}

// fieldPath writes a JSON pointer as the quoted field name the error
// messages use: /request/ip is "request.ip", /checks/3/hits "checks[3].hits".
// Only the array fields of the bodies, the top-level "checks" and
// "returns", have indices; every other token is a name, all-digit map keys
// too (/attrs/7 is "attrs.7").
func fieldPath(p jsontext.Pointer) string {
	var b strings.Builder
	prev, n := "", 0
	for tok := range p.Tokens() {
		switch {
		case n == 1 && (prev == "checks" || prev == "returns"):
			b.WriteString("[" + tok + "]")
		case n > 0:
			b.WriteString("." + tok)
		default:
			b.WriteString(tok)
		}
		prev, n = tok, n+1
	}
	return strconv.Quote(b.String())
}

// within is " in field F" for a pointer, or nothing at the top level.
func within(p jsontext.Pointer) string {
	if p == "" {
		return ""
	}
	return " in " + fieldPath(p)
}

// jsonKindName names the kind of a JSON value as the messages do.
func jsonKindName(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 'f', 't':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '{':
		return "an object"
	case '[':
		return "an array"
	default:
		return "a value"
	}
}

// goKindName says what a Go type wants, in JSON's words.
func goKindName(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.Int64, reflect.Int:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice:
		return "an array"
	default:
		return t.Kind().String()
	}
}

// toRequest validates a body decoded by decodeJSON and makes it a request.
func (b *checkBody) toRequest() (*host.CheckRequest, *Error) {
	hits := int64(1)
	if b.Hits != nil {
		hits = *b.Hits
	}
	if e := checkLimits(hits, b.DedupID); e != nil {
		return nil, e
	}
	req := &host.CheckRequest{
		Request:    b.Request.toHost(),
		Attrs:      b.Attrs,
		Hits:       hits,
		DedupID:    b.DedupID,
		BestEffort: b.BestEffort,
	}
	return req, nil
}

// checkLimits refuses hits and dedup ids out of bounds.
func checkLimits(hits int64, dedupID string) *Error {
	if hits < -MaxHits || hits > MaxHits {
		return newBadRequest("invalid_field", "hits: must be between %d and %d, got %d", -MaxHits, MaxHits, hits)
	}
	if len(dedupID) > maxDedupID {
		return newBadRequest("invalid_field", "dedup_id: at most %d bytes, got %d", maxDedupID, len(dedupID))
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
	Exempt       bool   `json:"exempt,omitempty"`
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
			Shadow: rr.Shadow, Exempt: rr.Exempt, Degraded: string(rr.Degraded),
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
		h[headerRateLimitPolicy] = all[0:1:1]
	}
	if rateLimitEnd > policyEnd {
		h[headerRateLimit] = all[1:2:2]
	}
	if !res.Allowed {
		h[headerRetryAfter] = all[2:3:3]
	}
}
