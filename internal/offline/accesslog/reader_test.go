package accesslog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fields are an Entry's exported fields but Time, comparable with ==.
type fields struct {
	IP, User, Method, URI, Path, Query, Proto, Host string
	Status                                          int
	Bytes                                           int64
	Referer, UserAgent, Request                     string
}

func fieldsOf(e *Entry) fields {
	return fields{e.IP, e.User, e.Method, e.URI, e.Path, e.Query, e.Proto, e.Host, e.Status, e.Bytes, e.Referer, e.UserAgent, e.Request}
}

// readOne reads a single line in format f.
func readOne(t *testing.T, f Format, line string) (*Entry, error) {
	t.Helper()
	r, err := NewReader(strings.NewReader(line+"\n"), Options{Format: f})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	err = r.Read(&e)
	if errors.Is(err, io.EOF) {
		t.Fatalf("%q: no entry", line)
	}
	return &e, err
}

func mustTime(t *testing.T, layout, s string) time.Time {
	t.Helper()
	tm, err := time.Parse(layout, s)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

const clfLayout = "02/Jan/2006:15:04:05 -0700"

func TestReadCombined(t *testing.T) {
	chrome := "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/118.0 Safari/537.36"
	tests := []struct {
		name string
		line string
		time string // in clfLayout
		want fields
	}{{
		name: "nginx",
		line: `192.168.1.10 - - [10/Oct/2023:13:55:36 +0000] "GET /api/v1/items?page=2&sort=asc HTTP/1.1" 200 1534 "https://example.com/start" "` + chrome + `"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "192.168.1.10", Method: "GET", URI: "/api/v1/items?page=2&sort=asc", Path: "/api/v1/items", Query: "page=2&sort=asc", Proto: "HTTP/1.1",
			Status: 200, Bytes: 1534, Referer: "https://example.com/start", UserAgent: chrome, Request: "GET /api/v1/items?page=2&sort=asc HTTP/1.1"},
	}, {
		name: "apache with user and negative offset",
		line: `127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)"`,
		time: "10/Oct/2000:13:55:36 -0700",
		want: fields{IP: "127.0.0.1", User: "frank", Method: "GET", URI: "/apache_pb.gif", Path: "/apache_pb.gif", Proto: "HTTP/1.0",
			Status: 200, Bytes: 2326, Referer: "http://www.example.com/start.html", UserAgent: "Mozilla/4.08 [en] (Win98; I ;Nav)", Request: "GET /apache_pb.gif HTTP/1.0"},
	}, {
		name: "apache bytes dash, positive offset",
		line: `10.0.0.5 - - [01/Feb/2024:00:00:01 +0530] "HEAD / HTTP/1.1" 304 - "-" "curl/8.5.0"`,
		time: "01/Feb/2024:00:00:01 +0530",
		want: fields{IP: "10.0.0.5", Method: "HEAD", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 304, UserAgent: "curl/8.5.0", Request: "HEAD / HTTP/1.1"},
	}, {
		name: "apache escapes",
		line: `10.0.0.5 - - [01/Feb/2024:00:00:01 +0000] "GET /a\"b\\c HTTP/1.1" 200 5 "-" "say \"hi\"\tthere"`,
		time: "01/Feb/2024:00:00:01 +0000",
		want: fields{IP: "10.0.0.5", Method: "GET", URI: `/a"b\c`, Path: `/a"b\c`, Proto: "HTTP/1.1", Status: 200, Bytes: 5, UserAgent: "say \"hi\"\tthere", Request: `GET /a"b\c HTTP/1.1`},
	}, {
		name: "nginx hex escapes",
		line: `10.0.0.5 - - [01/Feb/2024:00:00:01 +0000] "GET /x\x22y HTTP/1.1" 200 5 "-" "ua \x22quoted\x22 \xZZ"`,
		time: "01/Feb/2024:00:00:01 +0000",
		want: fields{IP: "10.0.0.5", Method: "GET", URI: `/x"y`, Path: `/x"y`, Proto: "HTTP/1.1", Status: 200, Bytes: 5, UserAgent: `ua "quoted" \xZZ`, Request: `GET /x"y HTTP/1.1`},
	}, {
		name: "ipv6",
		line: `2001:db8::1 - - [10/Oct/2023:13:55:36 +0200] "POST /login HTTP/2.0" 401 12 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0200",
		want: fields{IP: "2001:db8::1", Method: "POST", URI: "/login", Path: "/login", Proto: "HTTP/2.0", Status: 401, Bytes: 12, Request: "POST /login HTTP/2.0"},
	}, {
		name: "ipv4-mapped ipv6 is unmapped",
		line: `::ffff:10.1.2.3 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 1 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.1.2.3", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 1, Request: "GET / HTTP/1.1"},
	}, {
		name: "nginx 400 without a request",
		line: `203.0.113.9 - - [10/Oct/2023:13:55:36 +0000] "-" 400 0 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "203.0.113.9", Status: 400, Request: "-"},
	}, {
		name: "TLS handshake to a plain port",
		line: `203.0.113.9 - - [10/Oct/2023:13:55:36 +0000] "\x16\x03\x01\x02\x00\x01" 400 157 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "203.0.113.9", Status: 400, Bytes: 157, Request: "\x16\x03\x01\x02\x00\x01"},
	}, {
		name: "absolute-form target",
		line: `10.0.0.1 - - [10/Oct/2023:13:55:36 +0000] "GET http://example.com:8080/x/y?z=1 HTTP/1.1" 200 3 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", Method: "GET", URI: "http://example.com:8080/x/y?z=1", Path: "/x/y", Query: "z=1", Host: "example.com:8080", Proto: "HTTP/1.1", Status: 200, Bytes: 3, Request: "GET http://example.com:8080/x/y?z=1 HTTP/1.1"},
	}, {
		name: "percent-decoded path, bad escape kept",
		line: `10.0.0.1 - - [10/Oct/2023:13:55:36 +0000] "GET /caf%C3%A9/a%2Fb?q=%20 HTTP/1.1" 200 3 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", Method: "GET", URI: "/caf%C3%A9/a%2Fb?q=%20", Path: "/café/a/b", Query: "q=%20", Proto: "HTTP/1.1", Status: 200, Bytes: 3, Request: "GET /caf%C3%A9/a%2Fb?q=%20 HTTP/1.1"},
	}, {
		name: "undecodable path",
		line: `10.0.0.1 - - [10/Oct/2023:13:55:36 +0000] "GET /a%zz HTTP/1.1" 404 3 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", Method: "GET", URI: "/a%zz", Path: "/a%zz", Proto: "HTTP/1.1", Status: 404, Bytes: 3, Request: "GET /a%zz HTTP/1.1"},
	}, {
		name: "HTTP/0.9 request",
		line: `10.0.0.1 - - [10/Oct/2023:13:55:36 +0000] "GET /old" 200 3 "-" "-"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", Method: "GET", URI: "/old", Path: "/old", Status: 200, Bytes: 3, Request: "GET /old"},
	}, {
		name: "fields appended after the user agent",
		line: `10.0.0.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua" "10.9.9.9, 10.8.8.8" rt=0.123`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "ua", Request: "GET / HTTP/1.1"},
	}, {
		name: "common line read as combined",
		line: `10.0.0.1 user-identifier alice [10/Oct/2023:13:55:36 +0000] "DELETE /r/1 HTTP/1.1" 204 0`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: "alice", Method: "DELETE", URI: "/r/1", Path: "/r/1", Proto: "HTTP/1.1", Status: 204, Request: "DELETE /r/1 HTTP/1.1"},
	}, {
		name: "host name address (HostnameLookups)",
		line: `client-7.example.net - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "client-7.example.net", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "IPv6 with a zone",
		line: `fe80::1%eth0 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "fe80::1%eth0", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "user with a bracket",
		line: `10.0.0.1 - a[b [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: "a[b", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "user in brackets",
		line: `10.0.0.1 - [x] [ [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: "[x] [", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "user holding a time",
		line: `10.0.0.1 - x [01/Jan/2000:00:00:00 +0000] y [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: "x [01/Jan/2000:00:00:00 +0000] y", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "user holding a time and a request (Apache escapes its quotes)",
		line: `10.0.0.1 - [01/Jan/2000:00:00:00 +0000] \"GET /evil HTTP/1.1\" [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: `[01/Jan/2000:00:00:00 +0000] \"GET /evil HTTP/1.1\"`, Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}, {
		name: "user with a space, extra spaces",
		line: `10.0.0.1 - john doe [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1"  200  3  "-"  "x"`,
		time: "10/Oct/2023:13:55:36 +0000",
		want: fields{IP: "10.0.0.1", User: "john doe", Method: "GET", URI: "/", Path: "/", Proto: "HTTP/1.1", Status: 200, Bytes: 3, UserAgent: "x", Request: "GET / HTTP/1.1"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := readOne(t, Combined, tc.line)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(e); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			sameTime(t, tc.line, e.Time, mustTime(t, clfLayout, tc.time))
			if e.Raw() != tc.line || e.Line != 1 {
				t.Errorf("Raw %q Line %d", e.Raw(), e.Line)
			}
		})
	}
}

func TestReadCommon(t *testing.T) {
	line := `127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326 "http://ref/" "ua"`
	e, err := readOne(t, Common, line)
	if err != nil {
		t.Fatal(err)
	}
	want := fields{IP: "127.0.0.1", User: "frank", Method: "GET", URI: "/apache_pb.gif?x=1", Path: "/apache_pb.gif", Query: "x=1", Proto: "HTTP/1.0", Status: 200, Bytes: 2326, Request: "GET /apache_pb.gif?x=1 HTTP/1.0"}
	if got := fieldsOf(e); got != want {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	sameTime(t, line, e.Time, mustTime(t, clfLayout, "10/Oct/2000:13:55:36 -0700"))
}

func TestReadCombinedBadLines(t *testing.T) {
	ok := `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua"`
	tests := []struct{ name, line, reason string }{
		{"one word", `hello`, "missing remote address"},
		{"vhost_combined", `www.example.com:443 1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua"`, `remote address "www.example.com:443" is not an IP address or host name: is this Apache's vhost_combined format`},
		{"address with a port", `1.2.3.4:8080 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua"`, "remove the first field"},
		{"bad IPv6", `2001:db8::1::2 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua"`, "not an IP address"},
		{"no time", `1.2.3.4 - - "GET / HTTP/1.1" 200 3`, `missing "[time]"`},
		{"no user", `1.2.3.4 - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3`, "missing ident and user"},
		{"unclosed time", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000 "GET / HTTP/1.1" 200 3`, "time"},
		{"bad time", `1.2.3.4 - - [10/Oct/2023:25:55:36 +0000] "GET / HTTP/1.1" 200 3`, "out of range"},
		{"bad month", `1.2.3.4 - - [10/Foo/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3`, "dd/Mon/yyyy"},
		{"bad time after a bracketed user", `1.2.3.4 - a[b [10/Oct/2023:25:55:36 +0000] "GET / HTTP/1.1" 200 3`, "out of range"},
		{"bracketed user, no time", `1.2.3.4 - a[b "GET / HTTP/1.1" 200 3`, "missing ident and user"},
		{"unquoted request", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] GET / HTTP/1.1 200 3`, `missing quoted "request"`},
		{"unterminated request", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1 200 3`, "unterminated"},
		{"no status", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1"`, "missing status"},
		{"bad status", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 2x0 3`, "status is not a number"},
		{"no bytes", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200`, "missing bytes"},
		{"bad bytes", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 12k`, "bytes is not a number"},
		{"unquoted referer", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 http://x/ "ua"`, `missing quoted "referer"`},
		{"no user agent", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-"`, `missing quoted "user agent"`},
		{"unterminated user agent", `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua\"`, "user agent: unterminated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := ok + "\n\n" + tc.line + "\n" + ok + "\n"
			r, err := NewReader(strings.NewReader(in), Options{Format: Combined})
			if err != nil {
				t.Fatal(err)
			}
			var e Entry
			if err := r.Read(&e); err != nil {
				t.Fatal(err)
			}
			err = r.Read(&e)
			var le *LineError
			if !errors.As(err, &le) {
				t.Fatalf("got %v, want a *LineError", err)
			}
			if le.Line != 3 || !strings.Contains(le.Error(), tc.reason) || !strings.HasPrefix(le.Error(), "line 3: ") {
				t.Errorf("got %q (line %d), want line 3 and %q", le, le.Line, tc.reason)
			}
			// Reading goes on.
			if err := r.Read(&e); err != nil || e.Line != 4 || e.UserAgent != "ua" {
				t.Fatalf("after the bad line: %v, line %d", err, e.Line)
			}
			if err := r.Read(&e); err != io.EOF {
				t.Fatalf("at the end: %v", err)
			}
			if r.Bad() != 1 || r.Line() != 4 {
				t.Errorf("Bad %d Line %d, want 1 and 4", r.Bad(), r.Line())
			}
		})
	}
}

func TestReaderLines(t *testing.T) {
	a := `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET /a HTTP/1.1" 200 3 "-" "-"`
	b := `2.2.2.2 - - [10/Oct/2023:13:55:37 +0000] "GET /b HTTP/1.1" 200 3 "-" "-"`
	c := `3.3.3.3 - - [10/Oct/2023:13:55:38 +0000] "GET /c HTTP/1.1" 200 3 "-" "-"`
	// Blank lines, CRLF, spaces, and a last line without a newline.
	in := "\n" + a + "\r\n  \t\r\n\n" + b + "\n" + c
	r, err := NewReader(strings.NewReader(in), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []*Entry
	for {
		e := new(Entry)
		err := r.Read(e)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, e)
	}
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3", len(got))
	}
	for i, w := range []struct {
		line int
		path string
	}{{2, "/a"}, {5, "/b"}, {6, "/c"}} {
		// Entries stay valid after later reads.
		if got[i].Line != w.line || got[i].Path != w.path || got[i].UserAgent != "" {
			t.Errorf("entry %d: line %d path %q, want %d %q", i, got[i].Line, got[i].Path, w.line, w.path)
		}
	}
	if got[0].Raw() != a {
		t.Errorf("Raw %q keeps its CR", got[0].Raw())
	}
	if r.Format() != Combined {
		t.Errorf("auto read %q, want combined", r.Format())
	}
	if err := r.Read(new(Entry)); err != io.EOF {
		t.Errorf("Read after EOF: %v", err)
	}
}

func TestReaderLongLines(t *testing.T) {
	line := func(n int) string {
		pre := `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET /`
		post := ` HTTP/1.1" 200 3 "-" "-"`
		return pre + strings.Repeat("a", n-len(pre)-len(post)) + post
	}
	t.Run("small max", func(t *testing.T) {
		const max = 200
		in := line(max) + "\n" + line(max+1) + "\n" + line(5000) + "\n" + line(max) + "\n" + line(max+1)
		r, err := NewReader(strings.NewReader(in), Options{MaxLine: max})
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		for i, want := range []int{0, -1, -1, 0, -1} {
			err := r.Read(&e)
			var le *LineError
			switch {
			case want == 0 && (err != nil || e.Line != i+1 || len(e.Raw()) != max):
				t.Fatalf("line %d: %v (line %d, %d bytes)", i+1, err, e.Line, len(e.Raw()))
			case want < 0 && (!errors.As(err, &le) || le.Line != i+1 || !strings.Contains(le.Reason, "longer than 200 bytes")):
				t.Fatalf("line %d: got %v, want too long", i+1, err)
			}
		}
		if err := r.Read(&e); err != io.EOF {
			t.Fatalf("got %v, want EOF", err)
		}
		if r.Bad() != 3 {
			t.Errorf("Bad = %d, want 3", r.Bad())
		}
	})
	t.Run("default max across the buffer", func(t *testing.T) {
		big := line(300_000)
		in := big + "\n" + line(DefaultMaxLine+10) + "\n" + big + "\n"
		r, err := NewReader(strings.NewReader(in), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		if err := r.Read(&e); err != nil || e.Raw() != big || !strings.HasPrefix(e.Path, "/aaaa") || e.Status != 200 {
			t.Fatalf("big line: %v", err)
		}
		var le *LineError
		if err := r.Read(&e); !errors.As(err, &le) || le.Line != 2 {
			t.Fatalf("too long line: %v", err)
		}
		if err := r.Read(&e); err != nil || e.Line != 3 || e.Raw() != big {
			t.Fatalf("line after the long one: %v, line %d", err, e.Line)
		}
	})
}

// TestReaderMaxLineCRLF: MaxLine counts a line without its \n or \r\n,
// in the buffer (small max) and past it (large max).
func TestReaderMaxLineCRLF(t *testing.T) {
	line := func(n int) string {
		pre := `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET /`
		post := ` HTTP/1.1" 200 3 "-" "-"`
		return pre + strings.Repeat("a", n-len(pre)-len(post)) + post
	}
	for _, max := range []int{200, 100_000} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			lines := []struct {
				text, end string
				ok        bool
			}{
				{line(max), "\r\n", true},
				{line(max + 1), "\r\n", false},
				{line(max), "\n", true},
				{line(max + 1), "\n", false},
				{line(max - 1), "\r\n", true},
				{line(max), "\r", true}, // the last line, its CR at the end of the input
			}
			var in strings.Builder
			for _, l := range lines {
				in.WriteString(l.text + l.end)
			}
			r, err := NewReader(strings.NewReader(in.String()), Options{MaxLine: max})
			if err != nil {
				t.Fatal(err)
			}
			var e Entry
			for i, l := range lines {
				err := r.Read(&e)
				var le *LineError
				switch {
				case l.ok && (err != nil || e.Line != i+1 || e.Raw() != l.text):
					t.Fatalf("line %d (%d bytes + %q): %v (line %d, %d bytes)", i+1, len(l.text), l.end, err, e.Line, len(e.Raw()))
				case !l.ok && (!errors.As(err, &le) || le.Line != i+1 || !strings.Contains(le.Reason, "longer than")):
					t.Fatalf("line %d (%d bytes + %q): got %v, want too long", i+1, len(l.text), l.end, err)
				}
			}
			if err := r.Read(&e); err != io.EOF {
				t.Fatalf("got %v, want EOF", err)
			}
		})
	}
}

// TestReaderBOM: a UTF-8 byte order mark before the first line is not
// part of it, whatever the format; a BOM elsewhere is left alone.
func TestReaderBOM(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	combined := `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "ua"`
	json := `{"time":"2023-10-10T13:55:36Z","remote_addr":"1.2.3.4"}`
	for _, tc := range []struct {
		in     string
		opt    Format
		format Format
		line   string
	}{
		{bom + combined + "\n", Auto, Combined, combined},
		{bom + json + "\n", Auto, JSON, json},
		{bom + combined + "\n", Combined, Combined, combined},
		{bom + "\r\n" + combined, Auto, Combined, combined}, // the BOM line is blank
	} {
		r, err := NewReader(strings.NewReader(tc.in), Options{Format: tc.opt})
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		if err := r.Read(&e); err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if e.IP != "1.2.3.4" || r.Format() != tc.format || e.Raw() != tc.line {
			t.Errorf("%q: IP %q, format %s, raw %q", tc.in, e.IP, r.Format(), e.Raw())
		}
	}
	r, err := NewReader(strings.NewReader(combined+"\n"+bom+combined+"\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	if err := r.Read(&e); err != nil {
		t.Fatal(err)
	}
	if err := r.Read(&e); err == nil && e.IP == "1.2.3.4" {
		t.Errorf("a BOM on line 2 was dropped")
	}
}

// TestLongEscapedFields reads fields of 1 MiB that are all escapes, which
// used to take a time quadratic in their length (see
// BenchmarkScanStringEscapes for the cost).
func TestLongEscapedFields(t *testing.T) {
	const n = 1 << 20
	opt := Options{MaxLine: 8 * n}
	pre := `1.2.3.4 - - [10/Oct/2023:13:55:36 +0000] "GET /`
	for _, tc := range []struct{ esc, want string }{
		{`\\`, `\`},
		{`\x41`, `A`},
		{`\"`, `"`},
	} {
		k := n / len(tc.esc)
		field, want := strings.Repeat(tc.esc, k), strings.Repeat(tc.want, k)
		opt.Format = Combined
		r, err := NewReader(strings.NewReader(pre+field+` HTTP/1.1" 200 3 "`+field+`" "`+field+`"`), opt)
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		if err := r.Read(&e); err != nil {
			t.Fatalf("combined %q: %v", tc.esc, err)
		}
		if e.UserAgent != want || e.Referer != want || e.Path != "/"+want || e.Status != 200 {
			t.Errorf("combined %q: wrong fields (user agent %d bytes)", tc.esc, len(e.UserAgent))
		}
	}
	for _, tc := range []struct{ esc, want string }{
		{`\u0000`, "\x00"},
		{`\\`, `\`},
		{`\"`, `"`},
	} {
		k := n / len(tc.esc)
		field, want := strings.Repeat(tc.esc, k), strings.Repeat(tc.want, k)
		// Read, skipped, and skipped inside an array and an object.
		line := `{"time":1,"skipped":"` + field + `","http_user_agent":"` + field + `","a":["` + field + `"],"o":{"k":"` + field + `"},"status":200}`
		opt.Format = JSON
		r, err := NewReader(strings.NewReader(line), opt)
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		if err := r.Read(&e); err != nil {
			t.Fatalf("json %q: %v", tc.esc, err)
		}
		if e.UserAgent != want || e.Status != 200 {
			t.Errorf("json %q: wrong fields (user agent %d bytes)", tc.esc, len(e.UserAgent))
		}
	}
}

func TestNewReaderOptions(t *testing.T) {
	if _, err := NewReader(strings.NewReader(""), Options{Format: "xml"}); err == nil || !strings.Contains(err.Error(), `"xml"`) {
		t.Errorf("unknown format: %v", err)
	}
	if _, err := NewReader(strings.NewReader(""), Options{MaxLine: -1}); err == nil {
		t.Error("negative MaxLine accepted")
	}
	for in, want := range map[string]Format{"": Auto, "JSON": JSON, " combined ": Combined, "common": Common, "auto": Auto} {
		if f, err := ParseFormat(in); err != nil || f != want {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q", in, f, err, want)
		}
	}
	if _, err := ParseFormat("clf"); err == nil {
		t.Error(`ParseFormat("clf") succeeded`)
	}
}

// errReader fails after its data.
type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestReaderInputError(t *testing.T) {
	boom := errors.New("boom")
	r, err := NewReader(&errReader{data: []byte(`1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3` + "\n"), err: boom}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	if err := r.Read(&e); err != nil {
		t.Fatal(err)
	}
	err = r.Read(&e)
	var le *LineError
	if !errors.Is(err, boom) || errors.As(err, &le) || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("got %v, want boom at line 2, not a LineError", err)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	a := `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET /a HTTP/1.1" 200 3 "-" "-"` + "\n"
	b := `2.2.2.2 - - [10/Oct/2023:13:55:37 +0000] "GET /b HTTP/1.1" 200 3 "-" "-"` + "\n"
	gz := func(s string) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	paths := func(p string) ([]string, error) {
		f, err := Open(p, nil)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, err := NewReader(f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for {
			var e Entry
			if err := r.Read(&e); err == io.EOF {
				return out, nil
			} else if err != nil {
				return out, err
			}
			out = append(out, e.Path)
		}
	}
	for name, data := range map[string][]byte{
		"plain.log":     []byte(a + b),
		"access.log.gz": gz(a + b),
		"rotated.log.1": gz(a + b),                             // gzip without the name
		"multi.gz":      append(gz(a), gz(b)...),               // concatenated members (cat a.gz b.gz)
		"named.gz":      []byte(a + b),                         // the name says gzip, the bytes do not
		"x":             []byte(strings.TrimSuffix(a+b, "\n")), // no final newline
	} {
		got, err := paths(write(name, data))
		if err != nil || strings.Join(got, ",") != "/a,/b" {
			t.Errorf("%s: got %q, %v", name, got, err)
		}
	}
	if got, err := paths(write("empty", nil)); err != nil || len(got) != 0 {
		t.Errorf("empty file: %q, %v", got, err)
	}
	corrupt := gz(a + b)
	corrupt = corrupt[:len(corrupt)-6] // truncate the trailer
	if _, err := paths(write("corrupt.gz", corrupt)); err == nil || !strings.Contains(err.Error(), "gzip") {
		t.Errorf("truncated gzip: %v", err)
	}
	// Cut in the middle of the data: the lines before the cut are read,
	// then an error that says what happened, once, and leaves naming the
	// file to the caller (who knows it).
	var long strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&long, "%d.%d.%d.%d - - [10/Oct/2023:13:55:36 +0000] \"GET /%d HTTP/1.1\" 200 %d \"-\" \"-\"\n",
			i%251, i%241, i%239, i%233, i*7919%10007, i*31%997)
	}
	cut := gz(long.String())
	got, err := paths(write("cut.gz", cut[:len(cut)/2]))
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || len(got) == 0 || len(got) >= 5000 ||
		!strings.HasPrefix(err.Error(), fmt.Sprintf("reading line %d: gzip: the data ends early (the file is truncated", len(got)+1)) ||
		strings.Contains(err.Error(), "cut.gz") {
		t.Errorf("cut gzip: %d lines, %v", len(got), err)
	}
	if _, err := Open(filepath.Join(dir, "missing.log"), nil); err == nil || !strings.Contains(err.Error(), "missing.log") {
		t.Errorf("missing file: %v", err)
	}
	bad := write("badheader.gz", []byte{0x1f, 0x8b, 1, 2, 3})
	if _, err := Open(bad, nil); err == nil || !strings.Contains(err.Error(), "gzip") || strings.Count(err.Error(), bad) != 1 {
		t.Errorf("bad gzip header: %v", err)
	}
}

// "-" reads the reader given for standard input, gzip or not, and Close
// leaves it open.
func TestOpenStdin(t *testing.T) {
	line := `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET /a HTTP/1.1" 200 3 "-" "-"` + "\n"
	var zipped bytes.Buffer
	w := gzip.NewWriter(&zipped)
	w.Write([]byte(line))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"plain": []byte(line), "gzip": zipped.Bytes()} {
		stdin := &closeCounter{Reader: bytes.NewReader(data)}
		f, err := Open("-", stdin)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(f)
		if err != nil || string(got) != line {
			t.Errorf("%s: read %q, %v", name, got, err)
		}
		if err := f.Close(); err != nil || stdin.closed {
			t.Errorf("%s: Close: %v, stdin closed %v", name, err, stdin.closed)
		}
	}
}

type closeCounter struct {
	io.Reader
	closed bool
}

func (c *closeCounter) Close() error { c.closed = true; return nil }

// Message is the reason and its cause, without the line number.
func TestLineErrorMessage(t *testing.T) {
	cause := errors.New("no time field")
	e := &LineError{Line: 7, Reason: "not a json log line", Err: cause}
	if e.Message() != "not a json log line: no time field" || e.Error() != "line 7: not a json log line: no time field" ||
		!errors.Is(e, cause) {
		t.Errorf("Message %q, Error %q", e.Message(), e.Error())
	}
	e = &LineError{Line: 8, Reason: "line longer than 10 bytes"}
	if e.Message() != "line longer than 10 bytes" || e.Error() != "line 8: line longer than 10 bytes" {
		t.Errorf("Message %q, Error %q", e.Message(), e.Error())
	}
}
