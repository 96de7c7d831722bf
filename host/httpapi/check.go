package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
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

// checkBody is the JSON body of POST /v1/check, and of each check of
// /v1/check/batch and /v1/acquire.
type checkBody struct {
	Request    requestBody       `json:"request"`
	Attrs      map[string]string `json:"attrs"`
	Hits       *int64            `json:"hits"`
	DedupID    string            `json:"dedup_id"`
	LeaseID    string            `json:"lease_id"`
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

// checkRequest is b's request, validated, with the refund policy applied
// to negative hits: every endpoint that takes a check body asks it.
func (s *Server) checkRequest(r *http.Request, b *checkBody) (*host.CheckRequest, *Error) {
	req, e := b.toRequest()
	if e == nil && req.Hits < 0 {
		e = s.refundRefused(r, "hits")
	}
	return req, e
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
	if err := host.CheckDedupID(b.LeaseID); err != nil {
		return nil, newBadRequest("invalid_field", "lease_id: %v", err)
	}
	req := &host.CheckRequest{
		Request:    b.Request.toHost(),
		Attrs:      b.Attrs,
		Hits:       hits,
		DedupID:    b.DedupID,
		LeaseID:    b.LeaseID,
		BestEffort: b.BestEffort,
	}
	return req, nil
}

// checkLimits refuses hits and dedup ids out of bounds.
func checkLimits(hits int64, dedupID string) *Error {
	if err := host.CheckHits(hits); err != nil {
		return newBadRequest("invalid_field", "hits: %v", err)
	}
	if err := host.CheckDedupID(dedupID); err != nil {
		return newBadRequest("invalid_field", "dedup_id: %v", err)
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
	// Held: the rule holds a slot for the lease id until POST /v1/release
	// frees it or its lease expires (host.RuleResult.Held).
	Held     bool   `json:"held,omitempty"`
	Degraded string `json:"degraded"`
	Error    string `json:"error,omitempty"`
}

func encodeResult(res *host.Result) *checkAnswer {
	a := &checkAnswer{Allowed: res.Allowed, RetryAfterMS: ceilMS(res.RetryAfter), Results: make([]resultAnswer, len(res.Results))}
	for i, rr := range res.Results {
		ra := resultAnswer{
			Rule: rr.Rule, Subject: rr.Subject, Plugin: rr.Plugin, Allowed: rr.Allowed,
			Granted: rr.Granted, Limit: rr.Limit, Remaining: rr.Remaining,
			ResetMS: ceilMS(rr.Reset), RetryAfterMS: ceilMS(rr.RetryAfter), DelayMS: ceilMS(rr.Delay),
			Shadow: rr.Shadow, Exempt: rr.Exempt, Held: rr.Held(), Degraded: string(rr.Degraded),
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
