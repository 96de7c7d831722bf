package grpcapi

// POST /json's requests and answers in their common form, read and written
// by hand: protojson's reflection cost as much as the decision itself
// (issue 40). Anything outside that form goes to protojson, so the endpoint
// accepts, refuses and answers exactly what protojson does;
// FuzzParseJSONRequest and TestAppendJSONResponseMatchesProtojson hold the
// hand-written paths to it.

import (
	"strconv"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ruled-dev/ruled/internal/jsonw"
)

// parseJSONRequest reads body as a RateLimitRequest when it is in the
// common form: an object of domain, descriptors and hitsAddend (or
// hits_addend), each at most once; descriptors of entries only; entries of
// key and value only; strings without escapes, control characters or
// invalid UTF-8; hitsAddend a plain integer. It reports false for any other
// body, which protojson then reads (or refuses).
func parseJSONRequest(body []byte) (*rlsv3.RateLimitRequest, bool) {
	p := jsonScanner{s: body}
	req := &rlsv3.RateLimitRequest{}
	var seen [3]bool // by requestField: protojson refuses a field twice
	ok := p.object(func(key string) bool {
		f := requestField(key)
		if f < 0 || seen[f] {
			return false
		}
		seen[f] = true
		var ok bool
		switch f {
		case fieldDomain:
			req.Domain, ok = p.str()
		case fieldDescriptors:
			ok = p.array(func() bool {
				d, ok := p.descriptor()
				req.Descriptors = append(req.Descriptors, d)
				return ok
			})
		case fieldHitsAddend:
			req.HitsAddend, ok = p.uint32()
		}
		return ok
	})
	if !ok || !p.end() {
		return nil, false
	}
	return req, true
}

// The fields of a RateLimitRequest that parseJSONRequest reads.
const (
	fieldDomain = iota
	fieldDescriptors
	fieldHitsAddend
)

// requestField is the field a member's key names (its JSON or its proto
// name, as protojson accepts), or -1.
func requestField(key string) int {
	switch key {
	case "domain":
		return fieldDomain
	case "descriptors":
		return fieldDescriptors
	case "hitsAddend", "hits_addend":
		return fieldHitsAddend
	}
	return -1
}

// jsonScanner reads the subset of JSON parseJSONRequest accepts.
type jsonScanner struct {
	s []byte
	i int
}

// skip skips JSON whitespace.
func (p *jsonScanner) skip() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next consumes c after whitespace, if it comes next.
func (p *jsonScanner) next(c byte) bool {
	p.skip()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether only whitespace is left.
func (p *jsonScanner) end() bool {
	p.skip()
	return p.i == len(p.s)
}

// str reads a string without escapes, control characters or invalid UTF-8.
func (p *jsonScanner) str() (string, bool) {
	if !p.next('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			s := p.s[start:p.i]
			p.i++
			if !utf8.Valid(s) {
				return "", false
			}
			return string(s), true
		case c == '\\' || c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// uint32 reads a number written as a plain decimal integer that fits.
func (p *jsonScanner) uint32() (uint32, bool) {
	p.skip()
	start := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	digits := p.s[start:p.i]
	if len(digits) == 0 || len(digits) > 10 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	if p.i < len(p.s) {
		if c := p.s[p.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(string(digits), 10, 32)
	return uint32(n), err == nil
}

// object reads an object, calling member for each key with the scanner at
// its value; member reads the value or reports false.
func (p *jsonScanner) object(member func(key string) bool) bool {
	if !p.next('{') {
		return false
	}
	if p.next('}') {
		return true
	}
	for {
		key, ok := p.str()
		if !ok || !p.next(':') || !member(key) {
			return false
		}
		if p.next('}') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// array reads an array, calling elem for each element.
func (p *jsonScanner) array(elem func() bool) bool {
	if !p.next('[') {
		return false
	}
	if p.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.next(']') {
			return true
		}
		if !p.next(',') {
			return false
		}
	}
}

// descriptor reads a descriptor of entries only.
func (p *jsonScanner) descriptor() (*rlcommonv3.RateLimitDescriptor, bool) {
	d := &rlcommonv3.RateLimitDescriptor{}
	seen := false
	ok := p.object(func(key string) bool {
		if key != "entries" || seen {
			return false
		}
		seen = true
		return p.array(func() bool {
			e, ok := p.entry()
			d.Entries = append(d.Entries, e)
			return ok
		})
	})
	return d, ok
}

// entry reads a descriptor entry of key and value only.
func (p *jsonScanner) entry() (*rlcommonv3.RateLimitDescriptor_Entry, bool) {
	e := &rlcommonv3.RateLimitDescriptor_Entry{}
	var seenKey, seenValue bool
	ok := p.object(func(key string) bool {
		var ok bool
		switch {
		case key == "key" && !seenKey:
			seenKey = true
			e.Key, ok = p.str()
		case key == "value" && !seenValue:
			seenValue = true
			e.Value, ok = p.str()
		}
		return ok
	})
	return e, ok
}

// appendJSONResponse appends resp in protobuf's JSON form (the fields
// protojson.Marshal writes, with the same values; whitespace and string
// escaping may differ, as protojson's own output varies) and reports true;
// or it reports false and returns b as it was when resp has a field it does
// not write (raw_body, dynamic_metadata, quotas, unit_multiplier, raw header
// values), an enum value without a name, an invalid duration or a string
// that is not UTF-8: protojson then writes the answer, or refuses it.
func appendJSONResponse(b []byte, resp *rlsv3.RateLimitResponse) ([]byte, bool) {
	if len(resp.GetRawBody()) > 0 || resp.GetDynamicMetadata() != nil || resp.GetQuota() != nil {
		return b, false
	}
	w := jsonWriter{b: b}
	w.open()
	if c := resp.GetOverallCode(); c != 0 {
		w.enum("overallCode", rlsv3.RateLimitResponse_Code_name, int32(c))
	}
	if len(resp.GetStatuses()) > 0 {
		w.key("statuses")
		w.b = append(w.b, '[')
		for i, s := range resp.GetStatuses() {
			if i > 0 {
				w.b = append(w.b, ',')
			}
			w.status(s)
		}
		w.b = append(w.b, ']')
	}
	w.headers("responseHeadersToAdd", resp.GetResponseHeadersToAdd())
	w.headers("requestHeadersToAdd", resp.GetRequestHeadersToAdd())
	w.close()
	if w.bad {
		return b, false
	}
	return w.b, true
}

// jsonWriter writes nested objects; bad records a value it cannot write.
type jsonWriter struct {
	b []byte
	// first holds, for each open object (depth of them), whether no member
	// was written yet. A response nests three deep: itself, a status, its
	// limit.
	first [3]bool
	depth int
	bad   bool
}

func (w *jsonWriter) open() {
	w.b = append(w.b, '{')
	w.first[w.depth] = true
	w.depth++
}

func (w *jsonWriter) close() {
	w.b = append(w.b, '}')
	w.depth--
}

// key writes a member's name, after a comma unless it is the first.
func (w *jsonWriter) key(name string) {
	top := w.depth - 1
	if !w.first[top] {
		w.b = append(w.b, ',')
	}
	w.first[top] = false
	w.b = append(w.b, '"')
	w.b = append(w.b, name...)
	w.b = append(w.b, '"', ':')
}

func (w *jsonWriter) str(name, s string) {
	if s == "" {
		return
	}
	if !utf8.ValidString(s) {
		w.bad = true
		return
	}
	w.key(name)
	w.b = jsonw.AppendString(w.b, s)
}

func (w *jsonWriter) uint(name string, n uint32) {
	if n == 0 {
		return
	}
	w.key(name)
	w.b = strconv.AppendUint(w.b, uint64(n), 10)
}

func (w *jsonWriter) enum(name string, names map[int32]string, v int32) {
	if v == 0 {
		return
	}
	s, ok := names[v]
	if !ok {
		w.bad = true
		return
	}
	w.key(name)
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *jsonWriter) status(s *rlsv3.RateLimitResponse_DescriptorStatus) {
	if s.GetQuota() != nil {
		w.bad = true
		return
	}
	w.open()
	w.enum("code", rlsv3.RateLimitResponse_Code_name, int32(s.GetCode()))
	if l := s.GetCurrentLimit(); l != nil {
		if l.GetUnitMultiplier() != nil {
			w.bad = true
		}
		w.key("currentLimit")
		w.open()
		w.str("name", l.GetName())
		w.uint("requestsPerUnit", l.GetRequestsPerUnit())
		w.enum("unit", rlsv3.RateLimitResponse_RateLimit_Unit_name, int32(l.GetUnit()))
		w.close()
	}
	w.uint("limitRemaining", s.GetLimitRemaining())
	if d := s.GetDurationUntilReset(); d != nil {
		w.duration("durationUntilReset", d)
	}
	w.close()
}

func (w *jsonWriter) headers(name string, hs []*corev3.HeaderValue) {
	if len(hs) == 0 {
		return
	}
	w.key(name)
	w.b = append(w.b, '[')
	for i, h := range hs {
		if len(h.GetRawValue()) > 0 {
			w.bad = true
		}
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.open()
		w.str("key", h.GetKey())
		w.str("value", h.GetValue())
		w.close()
	}
	w.b = append(w.b, ']')
}

// maxDurationSeconds is the largest duration protobuf allows, 10,000 years.
const maxDurationSeconds = 315_576_000_000

// duration writes d as protojson does: seconds with 0, 3, 6 or 9
// fractional digits and an "s".
func (w *jsonWriter) duration(name string, d *durationpb.Duration) {
	secs, nanos := d.GetSeconds(), int64(d.GetNanos())
	if secs < -maxDurationSeconds || secs > maxDurationSeconds || nanos <= -1e9 || nanos >= 1e9 ||
		(secs > 0 && nanos < 0) || (secs < 0 && nanos > 0) {
		w.bad = true
		return
	}
	w.key(name)
	w.b = append(w.b, '"')
	if secs < 0 || nanos < 0 {
		w.b = append(w.b, '-')
		secs, nanos = -secs, -nanos
	}
	w.b = strconv.AppendInt(w.b, secs, 10)
	if nanos != 0 {
		var buf [10]byte
		frac := strconv.AppendInt(buf[:0], 1e9+nanos, 10)[1:] // nine digits
		for len(frac) > 3 && string(frac[len(frac)-3:]) == "000" {
			frac = frac[:len(frac)-3]
		}
		w.b = append(w.b, '.')
		w.b = append(w.b, frac...)
	}
	w.b = append(w.b, 's', '"')
}
