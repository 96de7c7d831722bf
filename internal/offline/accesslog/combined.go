package accesslog

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

var (
	errNoIP         = errors.New("missing remote address")
	errNoUser       = errors.New("missing ident and user fields")
	errNoTime       = errors.New(`missing "[time]"`)
	errNoRequest    = errors.New(`missing quoted "request"`)
	errNoStatus     = errors.New("missing status")
	errBadStatus    = errors.New("status is not a number")
	errNoBytes      = errors.New("missing bytes")
	errBadBytes     = errors.New(`bytes is not a number or "-"`)
	errNoReferer    = errors.New(`missing quoted "referer"`)
	errNoUserAgent  = errors.New(`missing quoted "user agent"`)
	errUnterminated = errors.New("unterminated quoted field")
)

// parseCLF parses a line of the common log format, and with full the
// referer and user agent of the combined format after it:
//
//	host ident user [dd/Mon/yyyy:hh:mm:ss ±hhmm] "request" status bytes "referer" "user agent"
//
// A combined line may stop after bytes (a common line); what follows the
// user agent (fields nginx configs often append) is ignored, as is what
// follows bytes in a common line.
func parseCLF(s string, e *Entry, full bool, z *zones) error {
	i := strings.IndexByte(s, ' ')
	if i <= 0 {
		return errNoIP
	}
	if err := checkAddr(s[:i]); err != nil {
		return err
	}
	e.setIP(dash(s[:i]))
	s = s[i+1:]
	// ident, then the user up to the time; the user may hold spaces and
	// brackets.
	i = strings.IndexByte(s, ' ')
	j := timeStart(s)
	if i <= 0 || j < i+2 || s[j-1] != ' ' {
		if j < 0 {
			return errNoTime
		}
		return errNoUser
	}
	e.User = dash(strings.TrimSpace(s[i+1 : j-1]))
	s = s[j+1:]
	j = strings.IndexByte(s, ']')
	if j < 0 {
		return errNoTime
	}
	t, err := parseCLFTime(s[:j], z)
	if err != nil {
		return fmt.Errorf("time %q: %w", s[:j], err)
	}
	e.Time = t
	s = s[j+1:]

	req, s, ok, err := quoted(s)
	if !ok {
		if err != nil {
			return fmt.Errorf("request: %w", err)
		}
		return errNoRequest
	}
	e.Request = req
	setRequestLine(e, req)

	s = skipSpaces(s)
	if s == "" {
		return errNoStatus
	}
	n, s := digits(s)
	if n < 0 || (s != "" && s[0] != ' ') {
		return errBadStatus
	}
	e.Status = int(n)

	s = skipSpaces(s)
	if s == "" {
		return errNoBytes
	}
	if s[0] == '-' && (len(s) == 1 || s[1] == ' ') {
		s = s[1:]
	} else {
		n, s = digits(s)
		if n < 0 || (s != "" && s[0] != ' ') {
			return errBadBytes
		}
		e.Bytes = n
	}
	if !full || strings.TrimSpace(s) == "" {
		return nil
	}

	ref, s, ok, err := quoted(s)
	if !ok {
		if err != nil {
			return fmt.Errorf("referer: %w", err)
		}
		return errNoReferer
	}
	e.Referer = dash(ref)
	ua, _, ok, err := quoted(s)
	if !ok {
		if err != nil {
			return fmt.Errorf("user agent: %w", err)
		}
		return errNoUserAgent
	}
	e.UserAgent = dash(ua)
	return nil
}

// checkAddr checks the remote address field of a combined or common line:
// an IP address, or a host name (Apache's HostnameLookups), which has no
// ':'. A field with a ':' must be an IPv6 address; any other, such as
// the "www.example.com:443" of Apache's vhost_combined format, is an
// error. An address without ':' costs one byte search.
func checkAddr(a string) error {
	if strings.IndexByte(a, ':') < 0 {
		return nil
	}
	if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() {
		return nil
	}
	return fmt.Errorf("remote address %q is not an IP address or host name: "+
		"is this Apache's vhost_combined format, which logs the virtual host:port first? "+
		"Log in JSON or combined instead, or remove the first field (cut -d' ' -f2-)", a)
}

// timeStart returns the index in s (the line after the address) of the
// '[' that opens the time. The user before it is chosen by the client
// (Basic auth) and may hold '[', even a whole "[time]", but not a bare
// '"' (both servers escape it), so the time is the first '[' after a
// space that starts dd/Mon/yyyy:hh:mm:ss ±hhmm] followed by spaces and
// the quoted request; failing that, the first that starts such a time
// (a line whose request is missing); failing that, the first '[' (the
// parse reports what is wrong with its time); -1 when there is none.
// Each '[' is looked at once.
func timeStart(s string) int {
	first, shaped := -1, -1
	for off := 0; ; {
		k := strings.IndexByte(s[off:], '[')
		if k < 0 {
			break
		}
		j := off + k
		if first < 0 {
			first = j
		}
		if j > 0 && s[j-1] == ' ' && clfTimeShape(s[j+1:]) {
			if rest := skipSpaces(s[j+1+clfTimeLen+1:]); rest != "" && rest[0] == '"' {
				return j
			}
			if shaped < 0 {
				shaped = j
			}
		}
		off = j + 1
	}
	if shaped >= 0 {
		return shaped
	}
	return first
}

// clfTimeLen is the length of dd/Mon/yyyy:hh:mm:ss ±hhmm.
const clfTimeLen = 26

// clfTimeShape reports whether s starts with what looks like
// dd/Mon/yyyy:hh:mm:ss ±hhmm followed by ']': its separators, sign and
// closing bracket (parseCLFTime checks the rest).
func clfTimeShape(s string) bool {
	return len(s) > clfTimeLen && s[clfTimeLen] == ']' &&
		s[2] == '/' && s[6] == '/' && s[11] == ':' && s[14] == ':' && s[17] == ':' && s[20] == ' ' &&
		(s[21] == '+' || s[21] == '-')
}

// setRequestLine sets Method, URI, Path, Query and Proto from a request
// line, "GET /a?b HTTP/1.1" (or "GET /a" of HTTP/0.9). A request line of
// one word ("-", or the bytes of a TLS handshake sent to a plain port)
// sets nothing.
func setRequestLine(e *Entry, req string) {
	m, rest, ok := strings.Cut(req, " ")
	if !ok || m == "" {
		return
	}
	e.Method = m
	if k := strings.LastIndexByte(rest, ' '); k >= 0 && strings.HasPrefix(rest[k+1:], "HTTP/") {
		e.Proto = rest[k+1:]
		rest = rest[:k]
	}
	e.setURI(rest)
}

// quoted reads a double-quoted field after optional spaces, returning its
// unescaped value and the rest of s. ok is false when s does not start
// with a quote (after spaces) or the quote is not closed (err says so).
func quoted(s string) (val, rest string, ok bool, err error) {
	s = skipSpaces(s)
	if s == "" || s[0] != '"' {
		return "", s, false, nil
	}
	v, end, esc, ok := scanString(s, 0)
	if !ok {
		return "", s, false, errUnterminated
	}
	if esc {
		v = unescape(v)
	}
	return v, s[end:], true, nil
}

// unescape undoes the escapes of Apache and nginx logs: \" \\ \n \r \t
// and \xHH. Other backslashes are kept as they are.
func unescape(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		switch n := s[i+1]; n {
		case '"', '\\':
			b.WriteByte(n)
			i++
		case 'n':
			b.WriteByte('\n')
			i++
		case 'r':
			b.WriteByte('\r')
			i++
		case 't':
			b.WriteByte('\t')
			i++
		case 'x':
			if i+3 < len(s) && isHex(s[i+2]) && isHex(s[i+3]) {
				b.WriteByte(unhex(s[i+2])<<4 | unhex(s[i+3]))
				i += 3
				continue
			}
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

func skipSpaces(s string) string {
	for s != "" && s[0] == ' ' {
		s = s[1:]
	}
	return s
}

// digits reads a run of at most 18 decimal digits at the start of s; n is
// -1 when there is none.
func digits(s string) (n int64, rest string) {
	i := 0
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if i == 18 {
			return -1, s
		}
		n = n*10 + int64(s[i]-'0')
	}
	if i == 0 {
		return -1, s
	}
	return n, s[i:]
}
