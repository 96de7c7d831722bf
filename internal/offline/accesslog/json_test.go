package accesslog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func readJSON(t *testing.T, opt Options, line string) (*Entry, error) {
	t.Helper()
	opt.Format = JSON
	r, err := NewReader(strings.NewReader(line), opt)
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	return &e, r.Read(&e)
}

func TestReadJSON(t *testing.T) {
	tests := []struct {
		name string
		opt  Options
		line string
		time time.Time
		want fields
	}{{
		name: "nginx escape=json, all strings",
		line: `{"time":"2024-05-01T12:00:00+02:00","remote_addr":"203.0.113.7","remote_user":"-","request":"GET /api/x?id=7 HTTP/2.0","request_method":"GET","request_uri":"/api/x?id=7","host":"api.example.com","status":"429","body_bytes_sent":"17","http_referer":"","http_user_agent":"Mozilla/5.0 \"quoted\" caf\u00e9 \ud83d\ude00","request_time":"0.001"}`,
		time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.FixedZone("", 7200)),
		want: fields{IP: "203.0.113.7", Method: "GET", URI: "/api/x?id=7", Path: "/api/x", Query: "id=7", Proto: "HTTP/2.0", Host: "api.example.com",
			Status: 429, Bytes: 17, UserAgent: "Mozilla/5.0 \"quoted\" café 😀", Request: "GET /api/x?id=7 HTTP/2.0"},
	}, {
		name: "numbers, msec, uri and args, nested values skipped",
		line: ` { "msec": 1714564800.250, "status": 200, "body_bytes_sent": 0, "uri": "/p", "args": "a=1&b=2", "request_method": "POST", "remote_addr": "2001:db8::5", "extra": {"deep": [1, {"x": "}"}, "]"]}, "ok": true, "nothing": null, "host": "h" } `,
		time: time.Date(2024, 5, 1, 12, 0, 0, 250_000_000, time.UTC),
		want: fields{IP: "2001:db8::5", Method: "POST", URI: "/p", Path: "/p", Query: "a=1&b=2", Host: "h", Status: 200},
	}, {
		name: "first key of a list wins, whatever the order; null, empty and - fall through",
		line: `{"uri":"/decoded","request_uri":"/raw?x=1","ts":1,"time":null,"time_local":"10/Oct/2000:13:55:36 -0700","remote_addr":"-","client_ip":"10.0.0.9","http_host":"b","host":""}`,
		time: time.Date(2000, 10, 10, 13, 55, 36, 0, time.FixedZone("", -7*3600)),
		want: fields{IP: "10.0.0.9", URI: "/raw?x=1", Path: "/raw", Query: "x=1", Host: "b"},
	}, {
		name: "request line fills method and uri",
		line: `{"@timestamp":"2024-05-01T10:00:00.123456Z","request":"PUT /a%20b HTTP/1.1","status":"201"}`,
		time: time.Date(2024, 5, 1, 10, 0, 0, 123456000, time.UTC),
		want: fields{Method: "PUT", URI: "/a%20b", Path: "/a b", Proto: "HTTP/1.1", Status: 201, Request: "PUT /a%20b HTTP/1.1"},
	}, {
		name: "milliseconds as a string, nginx \\x escapes, address with port",
		line: `{"timestamp":"1714564800123","remote_addr":"198.51.100.4:51234","http_user_agent":"a \x22b\x22","request_uri":"/"}`,
		time: time.Date(2024, 5, 1, 12, 0, 0, 123_000_000, time.UTC),
		want: fields{IP: "198.51.100.4", URI: "/", Path: "/", UserAgent: `a "b"`},
	}, {
		name: "Caddy: nested keys and header arrays",
		opt: Options{JSON: JSONFields{
			Time: []string{"ts"}, IP: []string{"request.remote_ip"}, Method: []string{"request.method"}, URI: []string{"request.uri"},
			Host: []string{"request.host"}, Proto: []string{"request.proto"}, Bytes: []string{"size"},
			UserAgent: []string{"request.headers.User-Agent"}, Request: []string{},
		}},
		line: `{"level":"info","ts":1646861401.5,"logger":"http.log.access","msg":"handled request","request":{"remote_ip":"127.0.0.1","remote_port":"41342","proto":"HTTP/1.1","method":"GET","host":"localhost","uri":"/x?y=z","headers":{"Accept":["*/*"],"User-Agent":["curl/7.82.0"]}},"bytes_read":0,"user_id":"","duration":0.0001,"size":12,"status":200}`,
		time: time.Date(2022, 3, 9, 21, 30, 1, 500_000_000, time.UTC),
		want: fields{IP: "127.0.0.1", Method: "GET", URI: "/x?y=z", Path: "/x", Query: "y=z", Host: "localhost", Proto: "HTTP/1.1", Status: 200, Bytes: 12, UserAgent: "curl/7.82.0"},
	}, {
		name: "flat dotted key",
		opt:  Options{JSON: JSONFields{Method: []string{"http.request.method"}}},
		line: `{"time":"2024-05-01T12:00:00Z","http.request.method":"PATCH","http":{"request":{"method":"GET"}}}`,
		time: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC),
		want: fields{Method: "PATCH"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, err := readJSON(t, tc.opt, tc.line)
			if err != nil {
				t.Fatal(err)
			}
			if got := fieldsOf(e); got != tc.want {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			sameTime(t, tc.line, e.Time, tc.time)
		})
	}
}

func TestReadJSONBadLines(t *testing.T) {
	tests := []struct{ name, line, reason string }{
		{"not an object", `["a"]`, "not a JSON object"},
		{"a combined line", `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3`, "not a JSON object"},
		{"truncated", `{"time":"2024-05-01T12:00:00Z","status":200`, "malformed JSON"},
		{"unterminated string", `{"time":"2024-05-01T12:00:00Z","x":"abc}`, "malformed JSON"},
		{"missing colon", `{"time" "2024-05-01T12:00:00Z"}`, "malformed JSON"},
		{"bad literal", `{"time":"2024-05-01T12:00:00Z","x":nope}`, "malformed JSON"},
		{"trailing text", `{"time":"2024-05-01T12:00:00Z"} x`, "text after"},
		{"no time", `{"remote_addr":"1.2.3.4"}`, "no time field"},
		{"bad time", `{"time":"yesterday"}`, `time "yesterday"`},
		{"bad RFC 3339", `{"time":"2024-05-01T12:00:00"}`, "RFC 3339"},
		{"bad status", `{"time":1,"status":"OK"}`, `status "OK" is not a whole number`},
		{"fractional bytes", `{"time":1,"body_bytes_sent":1.5}`, "bytes"},
		{"too deep", `{"time":1,"x":` + strings.Repeat("[", 300) + strings.Repeat("]", 300) + `}`, "nested too deeply"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readJSON(t, Options{}, `{"time":1}`+"\n"+tc.line)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := NewReader(strings.NewReader(`{"time":1}`+"\n"+tc.line+"\n"+`{"time":2}`), Options{Format: JSON})
			var e Entry
			if err := r.Read(&e); err != nil {
				t.Fatal(err)
			}
			err = r.Read(&e)
			var le *LineError
			if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want line 2: %s", err, tc.reason)
			}
			if err := r.Read(&e); err != nil || e.Time.Unix() != 2 {
				t.Fatalf("after the bad line: %v", err)
			}
		})
	}
}

func TestJSONFieldsLazy(t *testing.T) {
	e, err := readJSON(t, Options{}, `{"time":1,"tenant":"acme","n":42,"nested":{"a":[1,"b"]}}`)
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.Fields()
	if err != nil {
		t.Fatal(err)
	}
	if f["tenant"] != "acme" || f["n"] != 42.0 || f["nested"].(map[string]any)["a"].([]any)[1] != "b" {
		t.Errorf("Fields = %v", f)
	}
	f["tenant"] = "changed"
	if f2, _ := e.Fields(); f2["tenant"] != "changed" {
		t.Errorf("Fields decoded twice: %v", f2)
	}
	// nginx's \xHH passes the reader but not encoding/json.
	e, err = readJSON(t, Options{}, `{"time":1,"ua":"a\x22b"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Fields(); err == nil || !strings.Contains(err.Error(), "decode JSON fields") {
		t.Errorf("Fields with \\x: %v", err)
	}
	// Text formats have none.
	e, err = readOne(t, Combined, `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3`)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := e.Fields(); f != nil || err != nil {
		t.Errorf("combined Fields = %v, %v", f, err)
	}
}

func TestJSONFieldsSet(t *testing.T) {
	var f JSONFields
	if err := f.Set("ip=client, x_real_ip ,"); err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.IP, "|") != "client|x_real_ip" || f.Time != nil {
		t.Errorf("got %+v", f)
	}
	e, err := readJSON(t, Options{JSON: f}, `{"time":1,"remote_addr":"1.1.1.1","x_real_ip":"2.2.2.2"}`)
	if err != nil {
		t.Fatal(err)
	}
	if e.IP != "2.2.2.2" {
		t.Errorf("IP %q", e.IP)
	}
	for _, bad := range []string{"ip", "address=x", "=x"} {
		if err := f.Set(bad); err == nil {
			t.Errorf("Set(%q) succeeded", bad)
		}
	}
	// No key: every line would lack the field (the time: every line
	// would fail). The keys set before stay.
	for _, bad := range []string{"ip=", "ip= , ,", "time="} {
		if err := f.Set(bad); err == nil || !strings.Contains(err.Error(), "no key named") {
			t.Errorf("Set(%q): %v, want an error saying no key is named", bad, err)
		}
	}
	if strings.Join(f.IP, "|") != "client|x_real_ip" || f.Time != nil {
		t.Errorf("after refused specs: %+v", f)
	}
	if _, err := NewReader(strings.NewReader(""), Options{JSON: JSONFields{Host: []string{"status"}}}); err == nil || !strings.Contains(err.Error(), `"status" is named for both`) {
		t.Errorf("a key for two fields: %v", err)
	}
	// Combined logs do not need JSON fields.
	if _, err := NewReader(strings.NewReader(""), Options{Format: Combined, JSON: JSONFields{Host: []string{"status"}}}); err != nil {
		t.Errorf("combined with bad JSON fields: %v", err)
	}
}

func TestAutoJSON(t *testing.T) {
	r, err := NewReader(strings.NewReader("\n  \n{\"time\":1714564800,\"request_uri\":\"/j\"}\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	if err := r.Read(&e); err != nil || e.Path != "/j" || e.Line != 3 || r.Format() != JSON {
		t.Fatalf("%v: path %q line %d format %q", err, e.Path, e.Line, r.Format())
	}
}

func TestJSONUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:        "plain",
		`a\"b\\c\/d`:   `a"b\c/d`,
		`\b\f\n\r\t`:   "\b\f\n\r\t",
		`\u00e9\u20AC`: "é€",
		`\ud83d\ude00`: "😀",
		`\ud83d`:       "\uFFFD",
		`\ud83dx`:      "\uFFFDx",
		`\ude00\u0041`: "\uFFFDA",
		`\x41\x4a\xZZ`: `AJ\xZZ`,
		`\u12`:         `\u12`,
		`\q`:           `\q`,
		`end\`:         `end\`,
	} {
		if got := jsonUnescape(in); got != want {
			t.Errorf("jsonUnescape(%q) = %q, want %q", in, got, want)
		}
	}
}
