package accesslog

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// JSONFields names the keys of a JSON log's object that fill an Entry.
// Each Entry field has a list of keys, tried in order: the first that is
// present and neither null, "" nor "-" wins. A nil list means the default
// (DefaultJSONFields); an empty non-nil list means the field is not read.
// A key with dots ("request.method") names a key inside nested objects
// (Caddy's logs) as well as a flat key of that name; when the value is an
// array, its first element is taken (Caddy's header lists).
type JSONFields struct {
	Time      []string // RFC 3339, combined-log time, or a Unix timestamp (see the package doc)
	IP        []string // an address:port or [v6]:port loses its port
	Method    []string
	URI       []string // request target, path and query; split into Path and Query
	Query     []string // the query, when URI has none (nginx's $args)
	Host      []string
	User      []string
	Status    []string // a number or a string holding one
	Bytes     []string // a number or a string holding one
	Referer   []string
	UserAgent []string
	Request   []string // a request line, "GET /a HTTP/1.1": gives the method, URI and proto that their keys do not
	Proto     []string
}

// DefaultJSONFields returns the keys read from a JSON log when
// Options.JSON does not name others: those of common nginx log_format
// setups (escape=json) with a few generic fallbacks.
func DefaultJSONFields() JSONFields {
	return JSONFields{
		Time:      []string{"time", "time_iso8601", "time_local", "msec", "@timestamp", "timestamp", "ts"},
		IP:        []string{"remote_addr", "client_ip", "ip"},
		Method:    []string{"request_method", "method"},
		URI:       []string{"request_uri", "uri", "path"},
		Query:     []string{"args", "query_string"},
		Host:      []string{"host", "http_host", "server_name"},
		User:      []string{"remote_user", "user"},
		Status:    []string{"status"},
		Bytes:     []string{"body_bytes_sent", "bytes_sent"},
		Referer:   []string{"http_referer", "referer"},
		UserAgent: []string{"http_user_agent", "user_agent"},
		Request:   []string{"request"},
		Proto:     []string{"server_protocol", "protocol"},
	}
}

// The Entry fields a JSON log fills, indexes into jsonParser.vals.
const (
	fTime = iota
	fIP
	fMethod
	fURI
	fQuery
	fHost
	fUser
	fStatus
	fBytes
	fReferer
	fUserAgent
	fRequest
	fProto
	nFields
)

// fieldNames are the names Set accepts, by field index.
var fieldNames = [nFields]string{"time", "ip", "method", "uri", "query", "host", "user", "status", "bytes", "referer", "user_agent", "request", "proto"}

func (f *JSONFields) lists() [nFields]*[]string {
	return [nFields]*[]string{&f.Time, &f.IP, &f.Method, &f.URI, &f.Query, &f.Host, &f.User, &f.Status, &f.Bytes, &f.Referer, &f.UserAgent, &f.Request, &f.Proto}
}

// Set sets one field's keys from a spec "FIELD=KEY[,KEY...]" (as a
// command-line flag would give it), FIELD being one of time, ip, method,
// uri, query, host, user, status, bytes, referer, user_agent, request,
// proto. At least one key is needed: a field read from no key would
// leave every line without it.
func (f *JSONFields) Set(spec string) error {
	name, keys, ok := strings.Cut(spec, "=")
	if !ok {
		return fmt.Errorf("JSON field %q: want FIELD=KEY[,KEY...]", spec)
	}
	name = strings.TrimSpace(name)
	for i, l := range f.lists() {
		if fieldNames[i] != name {
			continue
		}
		list := []string{}
		for k := range strings.SplitSeq(keys, ",") {
			if k = strings.TrimSpace(k); k != "" {
				list = append(list, k)
			}
		}
		if len(list) == 0 {
			return fmt.Errorf("JSON field %q: no key named (want FIELD=KEY[,KEY...])", spec)
		}
		*l = list
		return nil
	}
	return fmt.Errorf("JSON field %q: unknown field %q (want one of %s)", spec, name, strings.Join(fieldNames[:], ", "))
}

// keyNode is a key of the JSON object: the field it fills (-1: none) and
// the keys of a nested object under it.
type keyNode struct {
	field int8
	prio  int8
	sub   *keySet
}

// keySet finds the keyNode of a key: a small hash table, faster than a
// map for the few dozen short keys of a configuration.
type keySet struct {
	buckets [64][]keyItem
}

type keyItem struct {
	key  string
	node *keyNode
}

func bucketOf(k string) int {
	if k == "" {
		return 0
	}
	return (len(k) + int(k[0])*7 + int(k[len(k)-1])*13) & 63
}

// get returns the node of k, or nil.
func (ks *keySet) get(k string) *keyNode {
	for _, it := range ks.buckets[bucketOf(k)] {
		if it.key == k {
			return it.node
		}
	}
	return nil
}

// node returns the node of k, adding it when it is missing.
func (ks *keySet) node(k string) *keyNode {
	if n := ks.get(k); n != nil {
		return n
	}
	n := &keyNode{field: -1}
	b := bucketOf(k)
	ks.buckets[b] = append(ks.buckets[b], keyItem{k, n})
	return n
}

// jsonVal is the value a line gives a field.
type jsonVal struct {
	s    string
	kind byte // 0: none; 's': string; 'n': number or literal
	esc  bool // s holds escapes
	prio int8
}

// jsonParser reads the fields of one JSON object per line, without
// decoding what it does not need.
type jsonParser struct {
	keys *keySet
	vals [nFields]jsonVal
}

func newJSONParser(f JSONFields) (*jsonParser, error) {
	def := DefaultJSONFields()
	dl := def.lists()
	p := &jsonParser{keys: &keySet{}}
	owner := map[string]int{}
	for i, l := range f.lists() {
		list := *l
		if list == nil {
			list = *dl[i]
		}
		if len(list) > 100 {
			return nil, fmt.Errorf("JSON field %s: too many keys", fieldNames[i])
		}
		for prio, k := range list {
			if o, dup := owner[k]; dup && o != i {
				return nil, fmt.Errorf("JSON key %q is named for both %s and %s", k, fieldNames[o], fieldNames[i])
			}
			owner[k] = i
			insertKey(p.keys, k, int8(i), int8(prio))
		}
	}
	return p, nil
}

// insertKey adds name as a flat key and as every nesting its dots allow.
func insertKey(level *keySet, name string, field, prio int8) {
	n := level.node(name)
	if n.field < 0 || prio < n.prio {
		n.field, n.prio = field, prio
	}
	for k := 0; k < len(name); k++ {
		if name[k] != '.' || k == 0 || k == len(name)-1 {
			continue
		}
		p := level.node(name[:k])
		if p.sub == nil {
			p.sub = &keySet{}
		}
		insertKey(p.sub, name[k+1:], field, prio)
	}
}

var (
	errNotObject   = errors.New("not a JSON object")
	errJSONSyntax  = errors.New("malformed JSON")
	errJSONTrail   = errors.New("text after the JSON object")
	errJSONNoTime  = errors.New("no time field")
	errJSONDepth   = errors.New("JSON nested too deeply")
	maxJSONNesting = 200
)

// parse fills e from the JSON object in s.
func (p *jsonParser) parse(s string, e *Entry, z *zones) error {
	p.vals = [nFields]jsonVal{}
	i := skipWS(s, 0)
	if i == len(s) || s[i] != '{' {
		return errNotObject
	}
	i, err := p.object(s, i, p.keys, 0)
	if err != nil {
		return err
	}
	if skipWS(s, i) != len(s) {
		return errJSONTrail
	}
	return p.fill(e, z)
}

// object reads the object at s[i] ('{'), recording the values of keys and
// of their nested objects; it returns the index after it.
func (p *jsonParser) object(s string, i int, keys *keySet, depth int) (int, error) {
	if depth > maxJSONNesting {
		return 0, errJSONDepth
	}
	i = skipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return 0, errJSONSyntax
		}
		key, end, esc, ok := scanString(s, i)
		if !ok {
			return 0, errJSONSyntax
		}
		if esc {
			key = jsonUnescape(key)
		}
		i = skipWS(s, end)
		if i >= len(s) || s[i] != ':' {
			return 0, errJSONSyntax
		}
		i = skipWS(s, i+1)
		if i >= len(s) {
			return 0, errJSONSyntax
		}
		n := keys.get(key)
		var err error
		switch c := s[i]; {
		case c == '"':
			v, end, esc, ok := scanString(s, i)
			if !ok {
				return 0, errJSONSyntax
			}
			if n != nil && n.field >= 0 {
				p.set(n, jsonVal{s: v, kind: 's', esc: esc})
			}
			i = end
		case c == '{':
			if n != nil && n.sub != nil {
				i, err = p.object(s, i, n.sub, depth+1)
			} else {
				i, err = skipValue(s, i, depth)
			}
		case c == '[':
			if n != nil && n.field >= 0 {
				// The first element, when it is a string.
				if j := skipWS(s, i+1); j < len(s) && s[j] == '"' {
					if v, _, esc, ok := scanString(s, j); ok {
						p.set(n, jsonVal{s: v, kind: 's', esc: esc})
					}
				}
			}
			i, err = skipValue(s, i, depth)
		default:
			start := i
			i, err = skipValue(s, i, depth)
			if err == nil && n != nil && n.field >= 0 && s[start:i] != "null" {
				p.set(n, jsonVal{s: s[start:i], kind: 'n'})
			}
		}
		if err != nil {
			return 0, err
		}
		i = skipWS(s, i)
		if i >= len(s) {
			return 0, errJSONSyntax
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, errJSONSyntax
		}
	}
}

// set records v for n's field unless an earlier key of the list gave one.
func (p *jsonParser) set(n *keyNode, v jsonVal) {
	if v.kind == 's' && (v.s == "" || v.s == "-") {
		return
	}
	cur := &p.vals[n.field]
	if cur.kind != 0 && cur.prio <= n.prio {
		return
	}
	v.prio = n.prio
	*cur = v
}

// str returns field f's value as a string.
func (p *jsonParser) str(f int) string {
	v := &p.vals[f]
	if v.esc {
		return jsonUnescape(v.s)
	}
	return v.s
}

// fill sets e from the recorded values.
func (p *jsonParser) fill(e *Entry, z *zones) error {
	e.setIP(ipNoPort(p.str(fIP)))
	e.Host = p.str(fHost)
	e.User = p.str(fUser)
	e.Referer = p.str(fReferer)
	e.UserAgent = p.str(fUserAgent)
	e.Request = p.str(fRequest)
	if e.Request != "" && (p.vals[fMethod].kind == 0 || p.vals[fURI].kind == 0 || p.vals[fProto].kind == 0) {
		setRequestLine(e, e.Request)
	}
	if p.vals[fMethod].kind != 0 {
		e.Method = p.str(fMethod)
	}
	if p.vals[fURI].kind != 0 {
		e.setURI(p.str(fURI))
	}
	if p.vals[fProto].kind != 0 {
		e.Proto = p.str(fProto)
	}
	if e.Query == "" && p.vals[fQuery].kind != 0 {
		e.Query = p.str(fQuery)
	}
	for _, f := range [...]int{fStatus, fBytes} {
		if p.vals[f].kind == 0 {
			continue
		}
		s := p.str(f)
		n, rest := digits(s)
		if n < 0 || rest != "" {
			return fmt.Errorf("%s %q is not a whole number", fieldNames[f], s)
		}
		if f == fStatus {
			e.Status = int(n)
		} else {
			e.Bytes = n
		}
	}
	tv := &p.vals[fTime]
	if tv.kind == 0 {
		return errJSONNoTime
	}
	s := p.str(fTime)
	var err error
	if tv.kind == 'n' {
		e.Time, err = parseUnixTime(s)
	} else {
		e.Time, err = parseTimeString(s, z)
	}
	if err != nil {
		return fmt.Errorf("time %q: %w", s, err)
	}
	return nil
}

// parseTimeString parses a time given as a JSON string: RFC 3339, the
// time of the combined format, or a Unix timestamp.
func parseTimeString(s string, z *zones) (time.Time, error) {
	switch {
	case len(s) == 26 && s[2] == '/':
		return parseCLFTime(s, z)
	case len(s) >= 20 && s[4] == '-':
		return parseRFC3339(s, z)
	}
	t, err := parseUnixTime(s)
	if err != nil {
		return time.Time{}, errors.New("want RFC 3339, dd/Mon/yyyy:hh:mm:ss ±hhmm, or a Unix timestamp")
	}
	return t, nil
}

// ipNoPort drops the port of "1.2.3.4:5678" and "[::1]:5678" (Envoy's
// downstream_remote_address); other values are kept.
func ipNoPort(s string) string {
	if s == "" {
		return s
	}
	if s[0] == '[' {
		if k := strings.IndexByte(s, ']'); k > 0 {
			return s[1:k]
		}
		return s
	}
	if k := strings.IndexByte(s, ':'); k > 0 && strings.IndexByte(s[k+1:], ':') < 0 && strings.IndexByte(s[:k], '.') > 0 {
		return s[:k]
	}
	return s
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n') {
		i++
	}
	return i
}

// scanString reads the JSON string at s[i] ('"'), returning its content
// (still escaped when esc), the index after its closing quote, and false
// when it is not closed. It is one forward pass, linear in the string
// however many escapes it holds: a backslash skips the byte after it, and
// the first other quote closes the string. The quote found last is kept
// until an escape steps past it, so each byte is looked at once.
func scanString(s string, i int) (v string, end int, esc, ok bool) {
	start := i + 1
	j := start // where the search goes on
	q := -1    // the first quote at or after j, once found
	for {
		if q < j {
			k := strings.IndexByte(s[j:], '"')
			if k < 0 {
				return "", 0, false, false
			}
			q = j + k
		}
		b := strings.IndexByte(s[j:q], '\\')
		if b < 0 {
			return s[start:q], q + 1, esc, true
		}
		// An escape before the quote: step over it.
		esc = true
		j += b + 2
		if j > len(s) {
			return "", 0, false, false
		}
	}
}

// skipValue returns the index after the JSON value at s[i].
func skipValue(s string, i, depth int) (int, error) {
	switch c := s[i]; {
	case c == '"':
		_, end, _, ok := scanString(s, i)
		if !ok {
			return 0, errJSONSyntax
		}
		return end, nil
	case c == '{' || c == '[':
		level := 0
		for j := i; j < len(s); j++ {
			switch s[j] {
			case '"':
				_, end, _, ok := scanString(s, j)
				if !ok {
					return 0, errJSONSyntax
				}
				j = end - 1
			case '{', '[':
				level++
				if depth+level > maxJSONNesting {
					return 0, errJSONDepth
				}
			case '}', ']':
				level--
				if level == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errJSONSyntax
	case c == '-' || c >= '0' && c <= '9':
		j := i + 1
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '.' || s[j] == 'e' || s[j] == 'E' || s[j] == '+' || s[j] == '-') {
			j++
		}
		return j, nil
	case strings.HasPrefix(s[i:], "true"):
		return i + 4, nil
	case strings.HasPrefix(s[i:], "false"):
		return i + 5, nil
	case strings.HasPrefix(s[i:], "null"):
		return i + 4, nil
	}
	return 0, errJSONSyntax
}

// jsonUnescape decodes the escapes of a JSON string, and nginx's \xHH
// (log_format escape=default). Malformed escapes are kept as written; a
// lone surrogate becomes U+FFFD.
func jsonUnescape(s string) string {
	if strings.IndexByte(s, '\\') < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch n := s[i+1]; n {
		case '"', '\\', '/':
			b.WriteByte(n)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'x':
			if i+3 < len(s) && isHex(s[i+2]) && isHex(s[i+3]) {
				b.WriteByte(unhex(s[i+2])<<4 | unhex(s[i+3]))
				i += 3
				continue
			}
			b.WriteByte(c)
			continue
		case 'u':
			r, ok := hex4(s, i+2)
			if !ok {
				b.WriteByte(c)
				continue
			}
			next := i + 6 // after the four hex digits
			if utf16.IsSurrogate(r) {
				var r2 rune
				ok2 := false
				if next+1 < len(s) && s[next] == '\\' && s[next+1] == 'u' {
					r2, ok2 = hex4(s, next+2)
				}
				if d := utf16.DecodeRune(r, r2); ok2 && d != utf8.RuneError {
					r = d
					next += 6
				} else {
					r = utf8.RuneError
				}
			}
			b.WriteRune(r)
			i = next - 1
			continue
		default:
			b.WriteByte(c)
			continue
		}
		i++
	}
	return b.String()
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var r rune
	for _, c := range []byte(s[i : i+4]) {
		if !isHex(c) {
			return 0, false
		}
		r = r<<4 | rune(unhex(c))
	}
	return r, true
}

// findKey returns the raw value of the last top-level key name of the
// JSON object s: a string's content (still escaped) with kind 's', or any
// other value as written with kind 'v'; kind 0 when there is none or s is
// malformed.
func findKey(s, name string) (raw string, kind byte) {
	i := skipWS(s, 0)
	if i == len(s) || s[i] != '{' {
		return "", 0
	}
	i = skipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return "", 0
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return "", 0
		}
		key, end, esc, ok := scanString(s, i)
		if !ok {
			return "", 0
		}
		if esc {
			key = jsonUnescape(key)
		}
		i = skipWS(s, end)
		if i >= len(s) || s[i] != ':' {
			return "", 0
		}
		i = skipWS(s, i+1)
		if i >= len(s) {
			return "", 0
		}
		start := i
		var err error
		if i, err = skipValue(s, i, 0); err != nil {
			return "", 0
		}
		if key == name {
			if s[start] == '"' {
				raw, kind = s[start+1:i-1], 's'
			} else {
				raw, kind = s[start:i], 'v'
			}
		}
		i = skipWS(s, i)
		if i >= len(s) {
			return "", 0
		}
		switch s[i] {
		case ',':
			i = skipWS(s, i+1)
		case '}':
			return raw, kind
		default:
			return "", 0
		}
	}
}
