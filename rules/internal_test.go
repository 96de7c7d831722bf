package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/vm"
	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk"
)

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"/api/*", "/api/x", true},
		{"/api/*", "/api/x/y", false},
		{"/api/*", "/api/", true},
		{"/api/**", "/api", true},
		{"/api/**", "/api/", true},
		{"/api/**", "/api/x/y/z", true},
		{"/api/**", "/apix", false},
		{"/**/x", "/x", true},
		{"/**/x", "/a/b/x", true},
		{"/**/x", "/a/b/y", false},
		{"/a/**/b/*.json", "/a/b/c.json", true},
		{"/a/**/b/*.json", "/a/1/2/b/c.json", true},
		{"/a/**/b/*.json", "/a/1/2/b/c/d.json", false},
		{"**", "", true},
		{"**", "/anything/at/all", true},
		{"/v[12]/**", "/v2/users", true},
		{"/v[12]/**", "/v3/users", false},
		{"/a?c", "/abc", true},
	}
	for _, tc := range cases {
		got, err := glob(tc.pattern, tc.name)
		if err != nil || got != tc.want {
			t.Errorf("glob(%q, %q) = %v, %v; want %v", tc.pattern, tc.name, got, err, tc.want)
		}
	}
	if _, err := glob("/a/[/**", "/a"); err == nil {
		t.Error("a bad pattern with ** was accepted")
	}
}

// TestScalarPositions checks the mapping of expression offsets to file
// positions for every YAML scalar style.
func TestScalarPositions(t *testing.T) {
	const src = `a: request.path == "x"
b: "re\tq \"x\" y"
c: 'it''s x'
d: |
  first
    second x
e: >
  folded
  line x
f: plain
  continued x
g: "line \
  x"
`
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	f := newSrcFile("f.yaml", "/", []byte(src))
	want := map[string]string{
		"a": "f.yaml:1:20", // the quote before x
		"b": "f.yaml:2:13",
		"c": "f.yaml:3:11",
		"d": "f.yaml:6:12",
		"e": "f.yaml:9:8",
		"f": "f.yaml:11:13",
		"g": "f.yaml:13:3",
	}
	m := doc.Content[0]
	for i := 0; i < len(m.Content); i += 2 {
		k, v := m.Content[i].Value, m.Content[i+1]
		s := scalar{file: f, node: v}
		// The offset of the last "x" in the value.
		off := -1
		for j, r := range []rune(v.Value) {
			if r == 'x' {
				off = j
			}
		}
		if k == "a" {
			off-- // the opening quote of "x"
		}
		if got := s.pos(off).String(); got != want[k] {
			t.Errorf("%s (%q): got %s, want %s", k, v.Value, got, want[k])
		}
	}
}

// TestGuardsAgreeWithExpr checks that the conditions Match tests in Go
// decide exactly as the expression does.
func TestGuardsAgreeWithExpr(t *testing.T) {
	whens := []string{
		`request.path == "/login"`,
		`"/login" == request.path && request.method == "POST"`,
		`request.method in ["GET", "HEAD"] && request.path startsWith "/api/"`,
		`request.path endsWith ".png" && request.host != "cdn"`,
		`request.path contains "admin" and header("X-Role") == "ops"`,
		`attrs["tenant"] == "acme" && request.query["v"] == "2"`,
		`request.headers["x-tier"] == "pro" && request.user != ""`,
		`request.ip == "1.2.3.4" && len(request.path) > 3`,
		`len(request.path) > 3 && request.ip == "1.2.3.4"`,
		`request.path == "/a" || request.path == "/b"`,
		`true`,
		`cidr(request.ip, "1.2.3.0/24") && glob(request.path, "/api/**")`,
		`glob(request.path, "/*.png") || cidr(request.ip, "::/0")`,
	}
	inputs := []*Input{
		{},
		{Request: Request{Path: "/login", Method: "POST"}},
		{Request: Request{Path: "/login", Method: "GET"}},
		{Request: Request{Path: "/api/x", Method: "HEAD", IP: "1.2.3.4"}},
		{Request: Request{Path: "/a/b.png", Host: "web"}},
		{Request: Request{Path: "/b", Host: "cdn", User: "u", Headers: map[string]string{"x-tier": "pro", "x-role": "ops"}}},
		{Request: Request{Path: "/admin", Headers: map[string]string{"x-role": "ops"}, Query: map[string]string{"v": "2"}}, Attrs: map[string]string{"tenant": "acme"}},
	}
	fs := newFuncs()
	for _, w := range whens {
		prog, err := expr.Compile(w, append(fs.options(), expr.AsBool())...)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		r := &Rule{}
		r.when.guards, r.when.full = extractGuards(prog.Node())
		if !r.when.full {
			r.when.prog = prog
		}
		for i, in := range inputs {
			st := &evalState{}
			st.env.Request, st.env.Header = &st.req, st.header
			st.req, st.env.Attrs = in.Request, in.Attrs
			got, err := r.matches(st)
			if err != nil {
				t.Fatal(err)
			}
			var m vm.VM
			out, err := m.Run(prog, &st.env)
			if err != nil {
				t.Fatal(err)
			}
			if got != out.(bool) {
				t.Errorf("%s, input %d: Match says %v, expr says %v", w, i, got, out)
			}
		}
	}
	// Which of them avoid the VM entirely.
	for _, tc := range []struct {
		when   string
		guards int
		full   bool
	}{
		{`request.path == "/login"`, 1, true},
		{`request.method in ["GET", "HEAD"] && request.path startsWith "/api/"`, 2, true},
		{`request.ip == "1.2.3.4" && len(request.path) > 3`, 1, false},
		{`len(request.path) > 3 && request.ip == "1.2.3.4"`, 0, false},
		{`true`, 0, true},
		{`cidr(request.ip, "10.0.0.0/8") && glob(request.path, "/a/*")`, 2, true},
	} {
		prog, _ := expr.Compile(tc.when, append(fs.options(), expr.AsBool())...)
		g, full := extractGuards(prog.Node())
		if len(g) != tc.guards || full != tc.full {
			t.Errorf("%s: %d guards, full %v; want %d, %v", tc.when, len(g), full, tc.guards, tc.full)
		}
	}
}

// TestFastValuesAgreeWithExpr checks subjects and dynamic values computed
// in Go against the expression VM.
func TestFastValuesAgreeWithExpr(t *testing.T) {
	exprs := []struct {
		src     string
		strOnly bool
		fast    bool
	}{
		{`request.ip`, true, true},
		{`attrs["tenant"] + ":" + request.path`, true, true},
		{`"u:" + header("X-User") + "/" + request.query["v"]`, true, true},
		{`request.headers["x-tier"] == "pro" ? 1000 : 200`, false, true},
		{`header("x-tier") in ["pro", "ent"] ? "1m" : request.method == "GET" ? "10s" : "1s"`, false, true},
		{`request.user != "" ? 2.5 : true`, false, true},
		{`request.user != "" ? request.user : request.ip`, true, true},
		{`len(request.path) > 2 ? 1 : 2`, false, false},
		{`request.ip + string(len(request.path))`, true, false},
	}
	inputs := []*Input{
		{},
		{Request: Request{IP: "1.2.3.4", Path: "/x", Method: "GET", User: "u", Headers: map[string]string{"x-tier": "pro", "x-user": "al"}, Query: map[string]string{"v": "2"}}, Attrs: map[string]string{"tenant": "t"}},
		{Request: Request{IP: "::1", Path: "/", Method: "POST", Headers: map[string]string{"x-tier": "ent"}}},
	}
	fs := newFuncs()
	for _, e := range exprs {
		prog, err := expr.Compile(e.src, append(fs.options(), expr.AsAny())...)
		if err != nil {
			t.Fatalf("%s: %v", e.src, err)
		}
		fv, ok := asFastValue(prog.Node(), e.strOnly)
		if ok != e.fast {
			t.Errorf("%s: fast %v, want %v", e.src, ok, e.fast)
		}
		if !ok {
			continue
		}
		for i, in := range inputs {
			st := &evalState{}
			st.env.Request, st.env.Header = &st.req, st.header
			st.req, st.env.Attrs = in.Request, in.Attrs
			var m vm.VM
			want, err := m.Run(prog, &st.env)
			if err != nil {
				t.Fatal(err)
			}
			if got := fv.eval(&st.req, st.env.Attrs); got != want {
				t.Errorf("%s, input %d: Go says %#v, expr says %#v", e.src, i, got, want)
			}
			if e.strOnly {
				if got := fv.str(&st.req, st.env.Attrs); got != want {
					t.Errorf("%s, input %d: Go says %#v, expr says %#v", e.src, i, got, want)
				}
			}
		}
	}
}

// TestIndexMatchesLinearScan checks that the rule index visits exactly the
// rules a scan of every rule would match, in the same order.
func TestIndexMatchesLinearScan(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	whens := []string{
		`request.path == "/a"`, `request.path == "/b" && request.method == "POST"`, `request.host == "h1"`,
		`request.method in ["GET", "HEAD"]`, `request.headers["x-k"] == "1"`, `attrs["t"] == "acme"`,
		`request.user != ""`, `true`, `request.path in ["/a", "/c"]`, `request.query["q"] == "x" && request.path == "/a"`,
		`cidr(request.ip, "10.0.0.0/8")`, `request.ip == "10.0.0.1"`, `len(request.path) == 2`,
	}
	for i := range 60 {
		stop := ""
		if i%17 == 16 {
			stop = ", stop: true"
		}
		fmt.Fprintf(&b, "  - {name: r%d, when: '%s', subject: '\"s\"', plugin: fixedwindow, config: {limit: 1, window: 1s}%s}\n",
			i, whens[(i*7)%len(whens)], stop)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(dir, fakeCatalog{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.index.fields) == 0 {
		t.Fatal("nothing indexed")
	}
	for _, path := range []string{"/a", "/b", "/c", "/zz"} {
		for _, method := range []string{"GET", "POST"} {
			for _, ip := range []string{"10.0.0.1", "192.0.2.1"} {
				for _, extra := range []int{0, 1} {
					in := &Input{Request: Request{Path: path, Method: method, IP: ip, Host: "h1"}}
					if extra == 1 {
						in.Request.Host = "h2"
						in.Request.User = "u"
						in.Request.Headers = map[string]string{"x-k": "1"}
						in.Request.Query = map[string]string{"q": "x"}
						in.Attrs = map[string]string{"t": "acme"}
					}
					var got, want []string
					for _, sel := range s.Match(in) {
						got = append(got, sel.Rule.Name)
					}
					st := s.pool.Get().(*evalState)
					st.req, st.env.Attrs = in.Request, in.Attrs
					for _, r := range s.rules {
						if ok, _ := r.matches(st); ok {
							want = append(want, r.Name)
							if r.Stop {
								break
							}
						}
					}
					s.release(st)
					if strings.Join(got, ",") != strings.Join(want, ",") {
						t.Errorf("%+v:\n index %v\n scan  %v", in, got, want)
					}
				}
			}
		}
	}
}

type fakeCatalog struct{}

func (fakeCatalog) Lookup(name string) (sdk.Algorithm, bool) {
	if name == fixedwindow.Name {
		return fixedwindow.New(), true
	}
	return nil, false
}
