package accesslog

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Entry is one parsed log line. Its strings are substrings of one copy of
// the line (unescaped values aside), so an Entry stays valid after the
// next Read and holding it keeps its line alive. "-" fields are empty.
// An Entry is not safe for concurrent use: QueryMap and Fields cache.
type Entry struct {
	Line int       // 1-based line number in the input
	Time time.Time // the request's time, in the offset the log gives (UTC for Unix timestamps)

	IP     string // client address; an IPv4-mapped IPv6 address is unmapped
	User   string // remote (authenticated) user
	Method string
	// URI is the request target as logged (path and query, not decoded).
	URI string
	// Path is URI's path, percent-decoded as ruled decodes a live
	// request's path (kept as logged when it does not decode), without
	// the query. An absolute-form target (http://host/p) gives its path.
	Path  string
	Query string // URI's raw query, after "?", not decoded
	Proto string // HTTP/1.1, ...
	Host  string // Host header or server name; empty in combined/common logs

	Status    int
	Bytes     int64 // body bytes sent; 0 for "-"
	Referer   string
	UserAgent string

	// Request is the raw request line of combined/common logs ("GET /a
	// HTTP/1.1"), or the JSON request field.
	Request string

	raw       string // the whole line
	json      bool
	query     map[string]string
	queryDone bool
	fields    map[string]any
	fieldsErr error
	fieldsOK  bool
}

// Raw returns the line the Entry was parsed from, without its line ending.
func (e *Entry) Raw() string { return e.raw }

// QueryMap returns the query parameters, the first value of each, parsed
// from Query on the first call as ruled parses a live request's query
// (malformed pairs are dropped). It returns nil when there is no query.
// The map is the Entry's: do not modify it.
func (e *Entry) QueryMap() map[string]string {
	if !e.queryDone {
		e.queryDone = true
		e.query = parseQuery(e.Query)
	}
	return e.query
}

// parseQuery returns the first value of each query parameter, as
// url.URL.Query gives them for a live request; nil for no parameters.
func parseQuery(q string) map[string]string {
	if q == "" {
		return nil
	}
	m := make(map[string]string, strings.Count(q, "&")+1)
	addQuery(m, q)
	if len(m) == 0 {
		return nil
	}
	return m
}

// addQuery adds to m the first value of each parameter of q that m does
// not hold, parsing as url.ParseQuery does (pairs holding ";" or a bad
// escape are dropped) without allocating for pairs that need no
// unescaping.
func addQuery(m map[string]string, q string) {
	for q != "" {
		var pair string
		pair, q, _ = strings.Cut(q, "&")
		if pair == "" || strings.IndexByte(pair, ';') >= 0 {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		k, ok := queryUnescape(k)
		if !ok {
			continue
		}
		if v, ok = queryUnescape(v); !ok {
			continue
		}
		if _, dup := m[k]; !dup {
			m[k] = v
		}
	}
}

func queryUnescape(s string) (string, bool) {
	if strings.IndexByte(s, '%') < 0 && strings.IndexByte(s, '+') < 0 {
		return s, true
	}
	u, err := url.QueryUnescape(s)
	return u, err == nil
}

// Fields returns the line's JSON object, decoded with encoding/json on the
// first call (numbers are float64). It is nil for combined and common
// logs. A line the reader accepted can still fail here: the reader's
// scanner tolerates nginx's \xHH escapes, encoding/json does not.
func (e *Entry) Fields() (map[string]any, error) {
	if !e.json || e.fieldsOK {
		return e.fields, e.fieldsErr
	}
	e.fieldsOK = true
	if err := json.Unmarshal([]byte(e.raw), &e.fields); err != nil {
		e.fields, e.fieldsErr = nil, fmt.Errorf("decode JSON fields: %w", err)
	}
	return e.fields, e.fieldsErr
}

// setURI sets URI, Path and Query from a request target.
func (e *Entry) setURI(uri string) {
	e.URI = uri
	path, query, _ := strings.Cut(uri, "?")
	if path != "" && path[0] != '/' && strings.Contains(path, "://") {
		// Absolute form, as proxies log it: ruled sees the path.
		if u, err := url.ParseRequestURI(uri); err == nil {
			e.Path, e.Query = u.Path, u.RawQuery
			if e.Host == "" {
				e.Host = u.Host
			}
			return
		}
	}
	e.Query = query
	e.Path = decodePath(path)
}

// decodePath percent-decodes a path as url.ParseRequestURI does for u.Path;
// a path that does not decode is kept as it is.
func decodePath(p string) string {
	if strings.IndexByte(p, '%') < 0 {
		return p
	}
	if d, err := url.PathUnescape(p); err == nil {
		return d
	}
	return p
}

// setIP sets IP, unmapping an IPv4-mapped IPv6 address (::ffff:1.2.3.4)
// as ruled does for a live client.
func (e *Entry) setIP(ip string) {
	if len(ip) > 7 && ip[0] == ':' && strings.EqualFold(ip[:7], "::ffff:") && strings.IndexByte(ip[7:], '.') > 0 {
		ip = ip[7:]
	}
	e.IP = ip
}

// dash maps the "-" of an empty log field to "".
func dash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
