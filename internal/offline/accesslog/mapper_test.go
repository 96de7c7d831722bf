package accesslog

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

const (
	combinedLine = `203.0.113.7 - alice [10/Oct/2023:13:55:36 +0200] "GET /api/items?page=2&key=k1&key=k2 HTTP/1.1" 200 1534 "https://example.com/" "Mozilla/5.0"`
	jsonLine     = `{"time":"2023-10-10T13:55:36+02:00","remote_addr":"203.0.113.7","request_method":"POST","request_uri":"/login?next=%2Fhome","host":"example.com","status":"401","body_bytes_sent":"12","http_user_agent":"curl/8","tenant":"acme","http_x_forwarded_for":"198.51.100.1, 10.0.0.1","weight":2.5}`
)

func mapLine(t *testing.T, specs []string, f Format, line string) (rules.Input, error) {
	t.Helper()
	m, err := NewMapper(specs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := readOne(t, f, line)
	if err != nil {
		t.Fatal(err)
	}
	var in rules.Input
	err = m.Map(e, &in)
	return in, err
}

func TestMapDefault(t *testing.T) {
	in, err := mapLine(t, nil, Combined, combinedLine)
	if err != nil {
		t.Fatal(err)
	}
	want := rules.Request{IP: "203.0.113.7", Method: "GET", Path: "/api/items", User: "alice",
		Headers: map[string]string{"user-agent": "Mozilla/5.0", "referer": "https://example.com/"},
		Query:   map[string]string{"page": "2", "key": "k1"}}
	checkRequest(t, in.Request, want)
	if in.Attrs != nil {
		t.Errorf("Attrs = %v, want none", in.Attrs)
	}

	in, err = mapLine(t, nil, JSON, jsonLine)
	if err != nil {
		t.Fatal(err)
	}
	want = rules.Request{IP: "203.0.113.7", Method: "POST", Path: "/login", Host: "example.com",
		Headers: map[string]string{"user-agent": "curl/8"}, Query: map[string]string{"next": "/home"}}
	checkRequest(t, in.Request, want)

	// Nothing logged, nothing set.
	in, err = mapLine(t, nil, Combined, `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "-"`)
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, in.Request, rules.Request{IP: "1.1.1.1", Method: "GET", Path: "/"})
}

func checkRequest(t *testing.T, got, want rules.Request) {
	t.Helper()
	type scalars struct{ IP, Method, Path, Host, User string }
	g := scalars{got.IP, got.Method, got.Path, got.Host, got.User}
	w := scalars{want.IP, want.Method, want.Path, want.Host, want.User}
	if g != w || !maps.Equal(got.Headers, want.Headers) || !maps.Equal(got.Query, want.Query) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestMapSpecs(t *testing.T) {
	specs := []string{
		`ip=trim(split(fields.http_x_forwarded_for ?? ip, ",")[0])`, // the doc's examples
		`attrs.tenant=fields.tenant_id ?? fields.tenant`,
		`headers.x-api-key=query.next ?? ""`,
		`headers.User-Agent=upper(user_agent)`, // replaces the default, lower-cased name
		`query.page=status`,                    // a number, plainly
		`attrs.weight=fields.weight * 2`,       // a float, plainly
		`attrs.big=1e21`,
		`attrs.slow=bytes > 10`,
		`attrs.hour=time.Hour()`,
		`attrs.when=time`,
		`attrs.empty=referer`, // "": left out
		` path = lower(path) + "/" + method `,
		`attrs.class=status >= 500 ? "error" : "ok"`,
	}
	in, err := mapLine(t, specs, JSON, jsonLine)
	if err != nil {
		t.Fatal(err)
	}
	want := rules.Request{IP: "198.51.100.1", Method: "POST", Path: "/login/POST", Host: "example.com",
		Headers: map[string]string{"user-agent": "CURL/8", "x-api-key": "/home"},
		Query:   map[string]string{"next": "/home", "page": "401"}}
	checkRequest(t, in.Request, want)
	wantAttrs := map[string]string{"tenant": "acme", "weight": "5", "big": "1000000000000000000000", "slow": "true", "hour": "13", "when": "2023-10-10T13:55:36+02:00", "class": "ok"}
	if !maps.Equal(in.Attrs, wantAttrs) {
		t.Errorf("Attrs = %v, want %v", in.Attrs, wantAttrs)
	}

	// Dropping defaults; fields of a combined line are empty.
	in, err = mapLine(t, []string{`headers.referer=""`, `headers.user-agent=fields.x`, `attrs.q=query.key`, `user=""`}, Combined, combinedLine)
	if err != nil {
		t.Fatal(err)
	}
	checkRequest(t, in.Request, rules.Request{IP: "203.0.113.7", Method: "GET", Path: "/api/items", Query: map[string]string{"page": "2", "key": "k1"}})
	if !maps.Equal(in.Attrs, map[string]string{"q": "k1"}) {
		t.Errorf("Attrs = %v", in.Attrs)
	}

	// A line without a query reads an empty map.
	in, err = mapLine(t, []string{`attrs.n=string(len(query))`, `attrs.p=query.page ?? "none"`}, Combined, `1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "-"`)
	if err != nil {
		t.Fatal(err)
	}
	if in.Attrs["n"] != "0" || in.Attrs["p"] != "" {
		t.Errorf("Attrs = %v", in.Attrs)
	}
}

// TestMapForwardedFor runs the doc's X-Forwarded-For example on lines
// with the header and without it, which nginx logs as "" (escape=json),
// "-" (escape=default) or not at all: those give the logged address, not
// one shared "" or "-" subject. The same holds when the whole fields
// object has been decoded.
func TestMapForwardedFor(t *testing.T) {
	const spec = `ip=trim(split(fields.http_x_forwarded_for ?? ip, ",")[0])`
	line := func(xff string) string {
		return `{"time":1,"remote_addr":"203.0.113.7"` + xff + `,"request_uri":"/"}`
	}
	for _, specs := range [][]string{{spec}, {spec, `attrs.n=string(len(fields))`}} {
		for _, tc := range []struct {
			line, want string
		}{
			{line(`,"http_x_forwarded_for":"198.51.100.1, 10.0.0.1"`), "198.51.100.1"},
			{line(`,"http_x_forwarded_for":"198.51.100.1 ,10.0.0.1"`), "198.51.100.1"},
			{line(`,"http_x_forwarded_for":"2001:db8::1"`), "2001:db8::1"},
			{line(`,"http_x_forwarded_for":""`), "203.0.113.7"},
			{line(`,"http_x_forwarded_for":"-"`), "203.0.113.7"},
			{line(`,"http_x_forwarded_for":null`), "203.0.113.7"},
			{line(``), "203.0.113.7"},
			{`203.0.113.7 - - [10/Oct/2023:13:55:36 +0000] "GET / HTTP/1.1" 200 3 "-" "-"`, "203.0.113.7"},
		} {
			in, err := mapLine(t, specs, Auto, tc.line)
			if err != nil {
				t.Fatalf("%q: %v", tc.line, err)
			}
			if in.Request.IP != tc.want {
				t.Errorf("%q: ip %q, want %q (specs %q)", tc.line, in.Request.IP, tc.want, specs)
			}
		}
	}
	// fields.NAME: "" and "-" are missing, other strings are kept.
	in, err := mapLine(t, []string{`attrs.a=fields.a ?? "nil"`, `attrs.b=fields.b ?? "nil"`, `attrs.c=fields.c ?? "nil"`, `attrs.d=fields["d"] ?? "nil"`},
		JSON, `{"time":1,"a":"","b":"-","c":" ","d":"--"}`)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"a": "nil", "b": "nil", "c": " ", "d": "--"}; !maps.Equal(in.Attrs, want) {
		t.Errorf("Attrs = %v, want %v", in.Attrs, want)
	}
}

func TestMapReusesInput(t *testing.T) {
	m, err := NewMapper([]string{`attrs.s=string(status)`})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(strings.NewReader(combinedLine+"\n"+`1.1.1.1 - - [10/Oct/2023:13:55:36 +0000] "PUT /x HTTP/1.1" 201 3 "-" "-"`+"\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	var in rules.Input
	if err := r.Read(&e); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(&e, &in); err != nil {
		t.Fatal(err)
	}
	hdr := in.Request.Headers
	if err := r.Read(&e); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(&e, &in); err != nil {
		t.Fatal(err)
	}
	checkRequest(t, in.Request, rules.Request{IP: "1.1.1.1", Method: "PUT", Path: "/x", Headers: map[string]string{}, Query: map[string]string{}})
	if in.Attrs["s"] != "201" || len(in.Attrs) != 1 {
		t.Errorf("Attrs = %v", in.Attrs)
	}
	in.Request.Headers["probe"] = "x"
	if hdr["probe"] != "x" {
		t.Error("the headers map was not reused")
	}
	// The query map of the Entry is not the Input's.
	e2, _ := readOne(t, Combined, combinedLine)
	var in2 rules.Input
	if err := m.Map(e2, &in2); err != nil {
		t.Fatal(err)
	}
	if err := m.Map(e2, &in2); err != nil {
		t.Fatal(err)
	}
	if e2.QueryMap()["page"] != "2" || in2.Request.Query["page"] != "2" {
		t.Errorf("query: entry %v input %v", e2.QueryMap(), in2.Request.Query)
	}
}

func TestNewMapperErrors(t *testing.T) {
	tests := []struct {
		specs []string
		want  []string
	}{
		{[]string{`ip`}, []string{`map "ip": want TARGET=EXPR`}},
		{[]string{`ip=`}, []string{`map "ip=": want TARGET=EXPR`}},
		{[]string{`=ip`}, []string{`want TARGET=EXPR`}},
		{[]string{`client=ip`}, []string{`map "client=ip": unknown target "client"`}},
		{[]string{`headers.=ip`}, []string{`needs a name`}},
		{[]string{`header.x=ip`}, []string{`unknown target "header.x"`}},
		{[]string{`ip=split(ip, ",")`}, []string{`map "ip=split(ip, \",\")": the expression gives []string`}},
		{[]string{`attrs.q=query`}, []string{`gives map[string]string`}},
		{[]string{`ip=foo + 1`}, []string{`map "ip=foo + 1": unknown name foo`}},
		{[]string{`ip=(ip`}, []string{`map "ip=(ip":`, "at character"}},
		{[]string{`ip=ip`, `ip=host`}, []string{`map "ip=host": target already set by "ip=ip"`}},
		{[]string{`headers.X=ip`, `headers.x=host`}, []string{`target already set`}},
		{[]string{`bad`, `ip=)`, `path=path`}, []string{`map "bad"`, `map "ip=)"`}}, // every error, not the good spec
	}
	for _, tc := range tests {
		m, err := NewMapper(tc.specs)
		if err == nil || m != nil {
			t.Errorf("%q: no error", tc.specs)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q lacks %q", tc.specs, err, w)
			}
		}
		if strings.Contains(err.Error(), "path=path") {
			t.Errorf("%q: error %q names a good spec", tc.specs, err)
		}
	}
}

func TestMapRuntimeErrors(t *testing.T) {
	for _, tc := range []struct {
		spec, line, want string
	}{
		{`attrs.x=string(status % (status - 200))`, combinedLine, "integer divide by zero"},
		{`attrs.x=fields.n`, `{"time":1,"n":[1,2]}`, "want a string, number or boolean"},
		{`attrs.x=string(len(fields))`, `{"time":1,"t":"a\x22"}`, "decode JSON fields"},
		{`attrs.x=fields.o.a`, `{"time":1,"o":{"a":tru}}`, "fields.o: invalid character"},
		{`attrs.x=int(user_agent)`, combinedLine, "Mozilla"},
		{`attrs.x=fields.o.a.b`, `{"time":1,"o":{}}`, "(at character"},
	} {
		m, err := NewMapper([]string{tc.spec})
		if err != nil {
			t.Fatalf("%s: %v", tc.spec, err)
		}
		r, err := NewReader(strings.NewReader("\n"+tc.line), Options{})
		if err != nil {
			t.Fatal(err)
		}
		var e Entry
		if err := r.Read(&e); err != nil {
			t.Fatal(err)
		}
		var in rules.Input
		err = m.Map(&e, &in)
		var le *LineError
		if !errors.As(err, &le) || le.Line != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a LineError at line 2 with %q", tc.spec, err, tc.want)
			continue
		}
		if tc.want != "decode JSON fields" && !strings.Contains(err.Error(), tc.spec) {
			t.Errorf("%s: error %q does not name the spec", tc.spec, err)
		}
		// One line: the reason is listed beside its line number, with
		// no source snippet under it.
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q spans lines", tc.spec, err)
		}
	}
}

func TestMapperConcurrent(t *testing.T) {
	m, err := NewMapper([]string{`attrs.p=path + "!"`})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for i := range 4 {
		go func() {
			var err error
			for j := range 200 {
				e := &Entry{Path: strings.Repeat("x", i+j%3)}
				var in rules.Input
				if err = m.Map(e, &in); err == nil && in.Attrs["p"] != e.Path+"!" {
					err = errors.New("got " + in.Attrs["p"])
				}
				if err != nil {
					break
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestMapFields(t *testing.T) {
	line := `{"time":1,"tenant":"first","n":42,"f":0.5,"ok":true,"nil":null,"esc":"a\x22b\u00e9","o":{"k":["v"]},"tenant":"acme","weird key":1}`
	specs := []string{
		`attrs.tenant=fields.tenant`,     // the last of a repeated key, as encoding/json
		`attrs.n=fields.n + 1`,           // numbers are floats
		`attrs.f=fields["f"]`,            // a constant index is a member access
		`attrs.ok=fields.ok`,             // a boolean
		`attrs.nil=fields.nil ?? "dflt"`, // null is nil
		`attrs.missing=fields?.missing ?? "none"`,
		`attrs.esc=fields.esc`, // nginx's \x escapes are read here
		`attrs.k=fields.o.k[0]`,
		`attrs.has=string("n" in fields)`,     // the whole map
		`attrs.w=string(fields["weird key"])`, //
	}
	in, err := mapLine(t, specs, JSON, line)
	if err == nil || !strings.Contains(err.Error(), "decode JSON fields") {
		// `"n" in fields` decodes the whole object, which \x breaks.
		t.Fatalf("with \\x and the whole map: %v", err)
	}
	line = strings.Replace(line, `a\x22b`, `a\"b`, 1)
	in, err = mapLine(t, specs, JSON, line)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenant": "acme", "n": "43", "f": "0.5", "ok": "true", "nil": "dflt", "missing": "none", "esc": `a"bé`, "k": "v", "has": "true", "w": "1"}
	if !maps.Equal(in.Attrs, want) {
		t.Errorf("Attrs = %v\nwant    %v", in.Attrs, want)
	}
	// Without the whole map, \x is fine.
	in, err = mapLine(t, []string{`attrs.esc=fields.esc`}, JSON, `{"time":1,"esc":"a\x22b"}`)
	if err != nil || in.Attrs["esc"] != `a"b` {
		t.Errorf("fields.esc: %v, %v", in.Attrs, err)
	}
	// Combined lines have no fields.
	in, err = mapLine(t, []string{`attrs.x=fields.x ?? "none"`, `attrs.n=string(len(fields))`}, Combined, combinedLine)
	if err != nil || in.Attrs["x"] != "none" || in.Attrs["n"] != "0" {
		t.Errorf("combined fields: %v, %v", in.Attrs, err)
	}
}

func TestFindKey(t *testing.T) {
	s := `{ "a" : "x\"y" , "b":[1,{"a":2}], "c": {"d":"}"}, "e\u0041":-1.5e3 ,"a":"last"}`
	for _, tc := range []struct {
		name, raw string
		kind      byte
	}{{"a", "last", 's'}, {"b", `[1,{"a":2}]`, 'v'}, {"c", `{"d":"}"}`, 'v'}, {"eA", "-1.5e3", 'v'}, {"d", "", 0}} {
		raw, kind := findKey(s, tc.name)
		if raw != tc.raw || kind != tc.kind {
			t.Errorf("findKey(%q) = %q, %c; want %q, %c", tc.name, raw, kind, tc.raw, tc.kind)
		}
	}
	for _, bad := range []string{`[]`, `{"a"}`, `{"a":1`, `{"a":1 "b":2}`, `{"a":nope}`, ``} {
		if raw, kind := findKey(bad, "a"); kind != 0 {
			t.Errorf("findKey(%q) = %q", bad, raw)
		}
	}
}

// TestFastPathAllocs keeps the default path cheap: one allocation per
// combined line read (its string), none to map it into a reused Input.
func TestFastPathAllocs(t *testing.T) {
	r, err := NewReader(&cycle{data: []byte(benchCombined + "\n")}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMapper(nil)
	if err != nil {
		t.Fatal(err)
	}
	var e Entry
	var in rules.Input
	if n := testing.AllocsPerRun(100, func() {
		if err := r.Read(&e); err != nil {
			panic(err)
		}
	}); n != 1 {
		t.Errorf("Read: %v allocations a line, want 1", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		e.query, e.queryDone = nil, false
		if err := m.Map(&e, &in); err != nil {
			panic(err)
		}
	}); n != 0 {
		t.Errorf("Map: %v allocations a line, want 0", n)
	}
	if in.Request.Query["page"] != "2" || in.Request.Headers["user-agent"] == "" {
		t.Errorf("mapped %+v", in.Request)
	}
}
