package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ruled-dev/ruled/host"
)

// The check body is decoded by hand rather than through encoding/json: it is
// the hot path's one JSON input, and encoding/json's reflection and scanner
// took two and a half to five times as long as this parser, with two to
// three times the allocations (BenchmarkDecodeCheck); a typed loop over
// go-json-experiment's jsontext tokens took 1.4 to 2 times as long. The
// parser answers as encoding/json's decoding of checkBody does (decodeJSON,
// then toRequest): the same requests from the same bodies, and the same
// errors, message for message, in the same order of precedence. That means
// its rules too, kept here on purpose:
//
//   - member names match exactly, else case-insensitively by encoding/json's
//     folding ("HITS", "hitſ");
//   - a duplicate member wins over the earlier one, objects and maps merge
//     into what is there, null leaves a string, bool or struct as it was
//     and clears a map or hits;
//   - invalid UTF-8 and unpaired surrogates in strings become U+FFFD;
//   - a syntax error anywhere in the object wins over a type error or an
//     unknown field before it, and the first of those wins over the rest;
//   - data after the object is refused, and a body over MaxBodyBytes is
//     body_too_large where encoding/json would have needed to read past
//     the limit.
//
// TestDecodeCheckMatchesEncodingJSON and FuzzCheckBody hold it to that.

// maxDepth is encoding/json's limit on nested objects and arrays.
const maxDepth = 10000

// checkParser decodes one check body, read whole (at most MaxBodyBytes).
type checkParser struct {
	data  []byte
	pos   int
	depth int
	// cut is the error that ended the body early: an *http.MaxBytesError
	// or a failed read. Running out of input is that error, not a
	// truncated body.
	cut error
	// err is a syntax error or running out of input: parsing stops.
	err *Error
	// sem is the first type error or unknown field: parsing goes on, so
	// that a later syntax error wins as in encoding/json.
	sem     *Error
	short   bool // the input ended in the middle of a value
	hits    int64
	hitsSet bool
	unq     []byte // unescaped strings and names
	fold    []byte // folded names
}

var checkParsers = sync.Pool{New: func() any { return &checkParser{data: make([]byte, 0, 2048)} }}

// decodeCheck reads and validates a check body. Every failure is a 400 with
// a code and a message that names the problem.
func decodeCheck(w http.ResponseWriter, r *http.Request) (*host.CheckRequest, *Error) {
	p := checkParsers.Get().(*checkParser)
	defer p.release()
	p.read(http.MaxBytesReader(w, r.Body, MaxBodyBytes), r.ContentLength)
	req := new(host.CheckRequest)
	if e := p.parse(req); e != nil {
		return nil, e
	}
	req.Hits = 1
	if p.hitsSet {
		req.Hits = p.hits
	}
	if e := checkLimits(req.Hits, req.DedupID); e != nil {
		return nil, e
	}
	req.Request.Headers = host.NormalizeHeaders(req.Request.Headers)
	return req, nil
}

// read reads the body into p.data until its end, the size limit or a
// failed read. size is the body's Content-Length, or -1.
func (p *checkParser) read(r io.Reader, size int64) {
	b := p.data[:0]
	if size >= int64(cap(b)) && size < MaxBodyBytes {
		b = make([]byte, 0, size+1) // room to read to the end at once
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err != io.EOF {
				p.cut = err
			}
			p.data = b
			return
		}
	}
}

// release returns p to the pool, but not a large body's buffers.
func (p *checkParser) release() {
	const keep = 64 << 10
	if cap(p.data) > keep || cap(p.unq) > keep || cap(p.fold) > keep {
		return
	}
	*p = checkParser{data: p.data[:0], unq: p.unq[:0], fold: p.fold[:0]}
	checkParsers.Put(p)
}

func badJSON(format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: fmt.Sprintf(format, args...)}
}

// eof stops the parse for running out of input; it returns false.
func (p *checkParser) eof() bool {
	p.short = true
	if p.err == nil {
		if p.cut != nil {
			p.err = jsonError(p.cut)
		} else {
			p.err = badJSON("request body ends in the middle of the JSON object")
		}
	}
	return false
}

// syntax stops the parse with encoding/json's syntax error for the byte at
// i (an offset counts the bytes read up to and including it); it returns
// false.
func (p *checkParser) syntax(i int, context string) bool {
	if i >= len(p.data) {
		return p.eof()
	}
	if p.err == nil {
		p.err = badJSON("invalid JSON at byte %d: invalid character %s %s", i+1, quoteChar(p.data[i]), context)
	}
	return false
}

// quoteChar is encoding/json's quoting of a byte in a syntax error.
func quoteChar(c byte) string {
	switch c {
	case '\'':
		return `'\''`
	case '"':
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

// typeError records a value of the wrong kind at p.pos, unless an earlier
// error was recorded; false is a syntax error (no value starts there).
func (p *checkParser) typeError(field, want string) bool {
	var got string
	switch c := p.data[p.pos]; {
	case c == '"':
		got = "string"
	case c == '-' || '0' <= c && c <= '9':
		got = "number"
	case c == 't' || c == 'f':
		got = "bool"
	case c == '{':
		got = "object"
	case c == '[':
		got = "array"
	default:
		return p.syntax(p.pos, "looking for beginning of value")
	}
	if p.sem == nil {
		p.sem = &Error{Status: http.StatusBadRequest, Code: "invalid_field", Message: field + ": want " + want + ", got " + got}
	}
	return true
}

func (p *checkParser) unknownField(name []byte) bool {
	if p.sem == nil {
		p.sem = &Error{Status: http.StatusBadRequest, Code: "unknown_field", Message: "unknown field " + strconv.Quote(string(name))}
	}
	return p.skipValue()
}

// parse decodes the body into req (all but Hits, which it leaves in
// p.hits).
func (p *checkParser) parse(req *host.CheckRequest) *Error {
	c, ok := p.valueStart()
	if !ok {
		if p.cut != nil {
			return jsonError(p.cut)
		}
		return badJSON("request body is empty; want a JSON object")
	}
	switch c {
	case '{':
		p.checkObject(req)
	case 'n':
		p.literal("null")
	default:
		_ = p.typeError("body", "an object") && p.skipValue()
	}
	// A top-level scalar ends only at the byte after it.
	if p.err == nil && p.pos == len(p.data) && p.cut != nil && c != '{' && c != '[' {
		p.err = jsonError(p.cut)
	}
	if p.err != nil {
		return p.err
	}
	if p.sem != nil {
		return p.sem
	}
	// After the object, encoding/json reads on to the end of the body, and
	// reads a scalar there whole, before it refuses what it found: past the
	// size limit, that is body_too_large.
	c, ok = p.valueStart()
	if !ok && p.cut == nil {
		return nil
	}
	if ok && (c == '"' || c == '-' || '0' <= c && c <= '9' || c == 't' || c == 'f' || c == 'n') {
		ok = !(p.skipValue() && p.pos == len(p.data) || p.short)
	}
	var maxErr *http.MaxBytesError
	if !ok && errors.As(p.cut, &maxErr) {
		return jsonError(p.cut)
	}
	return badJSON("unexpected data after the JSON object")
}

// valueStart skips whitespace and returns the next byte; false is the end
// of the input.
func (p *checkParser) valueStart() (byte, bool) {
	for p.pos < len(p.data) {
		switch c := p.data[p.pos]; c {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return c, true
		}
	}
	return 0, false
}

func (p *checkParser) literal(lit string) bool {
	for i := 1; i < len(lit); i++ {
		j := p.pos + i
		if j >= len(p.data) {
			return p.eof()
		}
		if p.data[j] != lit[i] {
			return p.syntax(j, "in literal "+lit+" (expecting "+quoteChar(lit[i])+")")
		}
	}
	p.pos += len(lit)
	return true
}

// open consumes the '{' or '[' at p.pos.
func (p *checkParser) open() bool {
	p.depth++
	if p.depth > maxDepth {
		return p.syntax(p.pos, "exceeded max depth")
	}
	p.pos++
	return true
}

// member reads the next member name of an object and the colon after it;
// done is the end of the object. The name is valid until the next call.
func (p *checkParser) member(first bool) (name []byte, done, ok bool) {
	c, ok := p.valueStart()
	if !ok {
		return nil, false, p.eof()
	}
	if c == '}' {
		p.pos++
		p.depth--
		return nil, true, true
	}
	if !first {
		if c != ',' {
			return nil, false, p.syntax(p.pos, "after object key:value pair")
		}
		p.pos++
		if c, ok = p.valueStart(); !ok {
			return nil, false, p.eof()
		}
	}
	if c != '"' {
		return nil, false, p.syntax(p.pos, "looking for beginning of object key string")
	}
	raw, verbatim, ok := p.scanString()
	if !ok {
		return nil, false, false
	}
	name = raw
	if !verbatim {
		p.unq = appendUnquoted(p.unq[:0], raw)
		name = p.unq
	}
	if c, ok = p.valueStart(); !ok {
		return nil, false, p.eof()
	}
	if c != ':' {
		return nil, false, p.syntax(p.pos, "after object key")
	}
	p.pos++
	return name, false, true
}

// skipValue validates and skips the next value.
func (p *checkParser) skipValue() bool {
	c, ok := p.valueStart()
	if !ok {
		return p.eof()
	}
	switch {
	case c == '{':
		if !p.open() {
			return false
		}
		for first := true; ; first = false {
			_, done, ok := p.member(first)
			if !ok || done {
				return ok
			}
			if !p.skipValue() {
				return false
			}
		}
	case c == '[':
		if !p.open() {
			return false
		}
		if c, ok = p.valueStart(); ok && c == ']' {
			p.pos++
			p.depth--
			return true
		}
		for {
			if !p.skipValue() {
				return false
			}
			c, ok := p.valueStart()
			switch {
			case !ok:
				return p.eof()
			case c == ',':
				p.pos++
			case c == ']':
				p.pos++
				p.depth--
				return true
			default:
				return p.syntax(p.pos, "after array element")
			}
		}
	case c == '"':
		_, _, ok := p.scanString()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		_, ok := p.scanNumber()
		return ok
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.syntax(p.pos, "looking for beginning of value")
}

// plain marks the bytes that stand for themselves in a JSON string.
var plain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// scanString validates the string at p.pos (its opening quote) and returns
// its raw contents; verbatim says they are its value as they are (no
// escapes, valid UTF-8).
func (p *checkParser) scanString() (raw []byte, verbatim, ok bool) {
	d := p.data
	start := p.pos + 1
	i := start
	for i < len(d) && plain[d[i]] {
		i++
	}
	escaped, nonASCII := false, false
	for {
		if i >= len(d) {
			return nil, false, p.eof()
		}
		switch c := d[i]; {
		case c == '"':
			p.pos = i + 1
			raw = d[start:i]
			return raw, !escaped && (!nonASCII || utf8.Valid(raw)), true
		case c == '\\':
			escaped = true
			i++
			if i >= len(d) {
				return nil, false, p.eof()
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				i++
				for k := 0; k < 4; k, i = k+1, i+1 {
					if i >= len(d) {
						return nil, false, p.eof()
					}
					if !isHex(d[i]) {
						return nil, false, p.syntax(i, `in \u hexadecimal character escape`)
					}
				}
			default:
				return nil, false, p.syntax(i, "in string escape code")
			}
		case c < 0x20:
			return nil, false, p.syntax(i, "in string literal")
		default:
			nonASCII = nonASCII || c >= utf8.RuneSelf
			i++
		}
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// hex4 is the value of four validated hex digits.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c <= '9':
			c -= '0'
		case c <= 'F':
			c -= 'A' - 10
		default:
			c -= 'a' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendUnquoted appends the value of a validated string's raw contents as
// encoding/json decodes it: invalid UTF-8 and unpaired surrogates become
// U+FFFD.
func appendUnquoted(dst, raw []byte) []byte {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			switch e := raw[i+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r := hex4(raw[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					r2 := unicode.ReplacementChar
					if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
						r2 = hex4(raw[i+2:])
					}
					if pair := utf16.DecodeRune(r, r2); pair != unicode.ReplacementChar {
						r = pair
						i += 6
					} else {
						r = unicode.ReplacementChar
					}
				}
				dst = utf8.AppendRune(dst, r)
				continue
			default: // " \ /
				dst = append(dst, e)
			}
			i += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, size := utf8.DecodeRune(raw[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		}
	}
	return dst
}

// str is the value of a scanned string.
func (p *checkParser) str(raw []byte, verbatim bool) string {
	if verbatim {
		return string(raw)
	}
	p.unq = appendUnquoted(p.unq[:0], raw)
	return string(p.unq)
}

// scanNumber validates the number at p.pos and returns it.
func (p *checkParser) scanNumber() ([]byte, bool) {
	d := p.data
	start := p.pos
	i := start
	digits := func() {
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	isDigit := func(i int) bool { return i < len(d) && '0' <= d[i] && d[i] <= '9' }
	if d[i] == '-' {
		i++
		if !isDigit(i) {
			return nil, p.syntax(i, "in numeric literal")
		}
	}
	if d[i] == '0' {
		i++
	} else {
		digits()
	}
	if i < len(d) && d[i] == '.' {
		i++
		if !isDigit(i) {
			return nil, p.syntax(i, "after decimal point in numeric literal")
		}
		digits()
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if !isDigit(i) {
			return nil, p.syntax(i, "in exponent of numeric literal")
		}
		digits()
	}
	p.pos = i
	return d[start:i], true
}

// parseInt64 parses a valid JSON number as encoding/json does into an
// int64: false for a fraction, an exponent or an overflow.
func parseInt64(b []byte) (int64, bool) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u <= 1<<63:
		return -int64(u), true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}

// appendFoldedName is encoding/json's folding of member names: ASCII
// letters to upper case, other runes to the least rune of their case
// folding orbit (so "ſ" is "S", and "İ" is itself).
func appendFoldedName(out, in []byte) []byte {
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out
}

func (p *checkParser) checkObject(req *host.CheckRequest) bool {
	if !p.open() {
		return false
	}
	for first := true; ; first = false {
		name, done, ok := p.member(first)
		if !ok || done {
			return ok
		}
		switch p.checkField(name) {
		case memberRequest:
			ok = p.requestObject(&req.Request)
		case memberAttrs:
			ok = p.stringMap(&req.Attrs, "attrs")
		case memberHits:
			ok = p.hitsValue()
		case memberDedupID:
			ok = p.stringValue(&req.DedupID, "dedup_id")
		case memberBestEffort:
			ok = p.boolValue(&req.BestEffort, "best_effort")
		default:
			ok = p.unknownField(name)
		}
		if !ok {
			return false
		}
	}
}

// The members of checkBody and requestBody.
const (
	unknownMember = iota
	memberRequest
	memberAttrs
	memberHits
	memberDedupID
	memberBestEffort
	memberIP
	memberMethod
	memberPath
	memberHost
	memberUser
	memberHeaders
	memberQuery
)

// checkField is the checkBody member a name matches.
func (p *checkParser) checkField(name []byte) int {
	for i := 0; i < 2; i++ {
		switch string(name) {
		case "request":
			return memberRequest
		case "attrs":
			return memberAttrs
		case "hits":
			return memberHits
		case "dedup_id":
			return memberDedupID
		case "best_effort":
			return memberBestEffort
		case "REQUEST":
			return memberRequest
		case "ATTRS":
			return memberAttrs
		case "HITS":
			return memberHits
		case "DEDUP_ID":
			return memberDedupID
		case "BEST_EFFORT":
			return memberBestEffort
		}
		p.fold = appendFoldedName(p.fold[:0], name)
		name = p.fold
	}
	return unknownMember
}

// requestField is the requestBody member a name matches.
func (p *checkParser) requestField(name []byte) int {
	for i := 0; i < 2; i++ {
		switch string(name) {
		case "ip", "IP":
			return memberIP
		case "method", "METHOD":
			return memberMethod
		case "path", "PATH":
			return memberPath
		case "host", "HOST":
			return memberHost
		case "user", "USER":
			return memberUser
		case "headers", "HEADERS":
			return memberHeaders
		case "query", "QUERY":
			return memberQuery
		}
		p.fold = appendFoldedName(p.fold[:0], name)
		name = p.fold
	}
	return unknownMember
}

func (p *checkParser) requestObject(r *host.Request) bool {
	c, ok := p.valueStart()
	switch {
	case !ok:
		return p.eof()
	case c == 'n':
		return p.literal("null")
	case c != '{':
		return p.typeError("request", "an object") && p.skipValue()
	}
	if !p.open() {
		return false
	}
	for first := true; ; first = false {
		name, done, ok := p.member(first)
		if !ok || done {
			return ok
		}
		switch p.requestField(name) {
		case memberIP:
			ok = p.stringValue(&r.IP, "request.ip")
		case memberMethod:
			ok = p.stringValue(&r.Method, "request.method")
		case memberPath:
			ok = p.stringValue(&r.Path, "request.path")
		case memberHost:
			ok = p.stringValue(&r.Host, "request.host")
		case memberUser:
			ok = p.stringValue(&r.User, "request.user")
		case memberHeaders:
			ok = p.stringMap(&r.Headers, "request.headers")
		case memberQuery:
			ok = p.stringMap(&r.Query, "request.query")
		default:
			ok = p.unknownField(name)
		}
		if !ok {
			return false
		}
	}
}

func (p *checkParser) stringValue(dst *string, field string) bool {
	c, ok := p.valueStart()
	switch {
	case !ok:
		return p.eof()
	case c == '"':
		raw, verbatim, ok := p.scanString()
		if ok {
			*dst = p.str(raw, verbatim)
		}
		return ok
	case c == 'n':
		return p.literal("null")
	}
	return p.typeError(field, "a string") && p.skipValue()
}

func (p *checkParser) boolValue(dst *bool, field string) bool {
	c, ok := p.valueStart()
	switch {
	case !ok:
		return p.eof()
	case c == 't':
		*dst = true
		return p.literal("true")
	case c == 'f':
		*dst = false
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	}
	return p.typeError(field, "true or false") && p.skipValue()
}

func (p *checkParser) hitsValue() bool {
	c, ok := p.valueStart()
	switch {
	case !ok:
		return p.eof()
	case c == '-' || '0' <= c && c <= '9':
		raw, ok := p.scanNumber()
		if !ok {
			return false
		}
		if n, ok := parseInt64(raw); ok {
			p.hits, p.hitsSet = n, true
		} else if p.sem == nil {
			p.sem = &Error{Status: http.StatusBadRequest, Code: "invalid_field", Message: "hits: want an integer, got number " + string(raw)}
		}
		return true
	case c == 'n':
		p.hitsSet = false
		return p.literal("null")
	}
	return p.typeError("hits", "an integer") && p.skipValue()
}

// stringMap decodes an object of strings into *dst, merging into what is
// there.
func (p *checkParser) stringMap(dst *map[string]string, field string) bool {
	c, ok := p.valueStart()
	switch {
	case !ok:
		return p.eof()
	case c == 'n':
		*dst = nil
		return p.literal("null")
	case c != '{':
		return p.typeError(field, "an object") && p.skipValue()
	}
	if !p.open() {
		return false
	}
	m := *dst
	if m == nil {
		m = make(map[string]string)
		*dst = m
	}
	for first := true; ; first = false {
		name, done, ok := p.member(first)
		if !ok || done {
			return ok
		}
		key := string(name)
		var val string
		c, ok := p.valueStart()
		switch {
		case !ok:
			return p.eof()
		case c == '"':
			var raw []byte
			var verbatim bool
			if raw, verbatim, ok = p.scanString(); ok {
				val = p.str(raw, verbatim)
			}
		case c == 'n':
			ok = p.literal("null")
		default:
			ok = p.typeError(field, "a string") && p.skipValue()
		}
		if !ok {
			return false
		}
		m[key] = val
	}
}
