package rules_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
)

// want is an expected load error: position, code, rule and a message part.
type want struct {
	line, col int
	code      string
	rule      string
	msg       string
}

func checkErrors(t *testing.T, err error, file string, wants []want) {
	t.Helper()
	list := errorList(t, err)
	if len(list) != len(wants) {
		t.Errorf("got %d errors, want %d:\n%v", len(list), len(wants), err)
	}
	for i := range min(len(list), len(wants)) {
		g, w := list[i], wants[i]
		if filepath.Base(g.Pos.File) != file || g.Pos.Line != w.line || g.Pos.Column != w.col ||
			g.Code != w.code || g.Rule != w.rule || !strings.Contains(g.Message, w.msg) {
			t.Errorf("error %d:\n got  %s:%d:%d [%s] rule %q: %s\n want %s:%d:%d [%s] rule %q: ...%s...",
				i, filepath.Base(g.Pos.File), g.Pos.Line, g.Pos.Column, g.Code, g.Rule, g.Message,
				file, w.line, w.col, w.code, w.rule, w.msg)
		}
	}
}

func TestLoadReportsAllErrorsWithPositions(t *testing.T) {
	const src = `rules:
  - name: login
    when: request.method == "POST" && request.pth == "/login"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    limt: 5
    config: {limit: 5, window: 10s}
  - name: login
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10 sex}
`
	_, err := load(t, src)
	checkErrors(t, err, "rules.yaml", []want{
		{3, 47, rules.CodeExpr, "login", "when: request has no field pth"},
		{10, 5, rules.CodeUnknownField, "per-ip", `unknown field "limt"`},
		{12, 11, rules.CodeDuplicateRule, "login", "duplicate rule name (first defined at line 2)"},
		{15, 32, rules.CodeBadConfig, "login", `config: window: want a duration such as "500ms", "10s" or "1m", got 10 sex`},
	})
	// The whole list formats one error a line, each file:line:col: rule "name": message.
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 || !strings.HasSuffix(lines[1], `rules.yaml:10:5: rule "per-ip": unknown field "limt"`) {
		t.Errorf("formatted list:\n%s", err)
	}
}

func TestErrorFormat(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{&rules.Error{Pos: rules.Position{File: "rules.yaml", Line: 7, Column: 11}, Rule: "x", Code: rules.CodeUnknownField, Message: `unknown field "limt"`},
			`rules.yaml:7:11: rule "x": unknown field "limt"`},
		{&rules.Error{Pos: rules.Position{File: "rules.yaml", Line: 3}, Code: rules.CodeYAML, Message: "did not find expected key"},
			`rules.yaml:3: did not find expected key`},
		{&rules.Error{Pos: rules.Position{File: "rules.yaml"}, Code: rules.CodeRead, Message: "permission denied"},
			`rules.yaml: permission denied`},
		{&rules.EvalError{Rule: "x", Field: "subject", Pos: rules.Position{File: "r.yaml", Line: 4, Column: 14}, Err: rules.ErrEmptySubject},
			`r.yaml:4:14: rule "x": subject: subject evaluated to an empty string`},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		wants []want
	}{
		{"unknown top-level field", "rules: []\nrulez: []\n",
			[]want{{2, 1, rules.CodeUnknownField, "", `unknown field "rulez" (did you mean "rules"?)`}}},
		{"unknown rule field with suggestion", `rules:
  - name: a
    subjet: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{
			{2, 5, rules.CodeMissingField, "a", "subject is required"},
			{3, 5, rules.CodeUnknownField, "a", `unknown field "subjet" (did you mean "subject"?)`},
		}},
		{"missing name, subject and plugin", "rules:\n  - when: 'true'\n",
			[]want{
				{2, 5, rules.CodeMissingField, "", "rule has no name"},
				{2, 5, rules.CodeMissingField, "", "subject is required"},
				{2, 5, rules.CodeMissingField, "", "plugin is required"},
			}},
		{"bad name", "rules:\n  - {name: Per_IP, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 12, rules.CodeBadName, "Per_IP", "name must be"}}},
		{"bad on_error and flags", `rules:
  - name: a
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
    on_error: panic
    shadow: yes
    stop: 1
`, []want{
			{6, 15, rules.CodeBadOnError, "a", `on_error: want allow, deny or local, got "panic"`},
			{7, 13, rules.CodeBadValue, "a", `shadow: want true or false, got "yes"`},
			{8, 11, rules.CodeBadValue, "a", `stop: want true or false, got "1"`},
		}},
		{"duplicate key", `rules:
  - name: a
    subject: request.ip
    subject: request.user
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{4, 5, rules.CodeDuplicateField, "", `field "subject" given twice`}}},
		{"unknown plugin", "rules:\n  - {name: a, subject: request.ip, plugin: gcra, config: {rate: 1}}\n",
			[]want{{2, 44, rules.CodeUnknownPlugin, "a", `unknown plugin "gcra"`}}},
		{"misspelt built-in plugin", "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindw, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 44, rules.CodeUnknownPlugin, "a", `unknown plugin "fixedwindw" (did you mean "fixedwindow"?)`}}},
		{"misspelt declared plugin", `plugins:
  gcra: {wasm: gcra.wasm}
rules:
  - {name: a, subject: request.ip, plugin: gcar}
`, []want{{4, 44, rules.CodeUnknownPlugin, "a", `unknown plugin "gcar" (did you mean "gcra"?)`}}},
		{"plugin whose pin is invalid", `plugins:
  mine: {wasm: mine.wasm, sha256: "abc"}
rules:
  - {name: a, subject: request.ip, plugin: mine}
`, []want{
			{2, 35, rules.CodeBadPlugin, "", `plugin "mine": sha256 must be 64 hexadecimal digits`},
			{4, 44, rules.CodeUnknownPlugin, "a", `/rules.yaml:2:3 is invalid: sha256 must be 64 hexadecimal digits`},
		}},
		{"plugin declared with an unknown field", `plugins:
  mine: {wasm: mine.wasm, sha: x}
rules:
  - {name: a, subject: request.ip, plugin: mine}
`, []want{
			{2, 27, rules.CodeUnknownField, "", `unknown field "sha"`},
			{4, 44, rules.CodeUnknownPlugin, "a", `/rules.yaml:2:3 is invalid: unknown field "sha"`},
		}},
		{"declared plugin not in catalog", `plugins:
  gcra: {wasm: gcra.wasm}
rules:
  - {name: a, subject: request.ip, plugin: gcra}
`, []want{{4, 44, rules.CodeUnknownPlugin, "a", `plugin "gcra" is declared at`}}},
		{"bad plugin declarations", `plugins:
  both: {wasm: a.wasm, process: ./a}
  neither: {sha256: abc}
  Bad: {wasm: x.wasm, checksum: x}
`, []want{
			{2, 9, rules.CodeBadPlugin, "", "set exactly one of wasm and process"},
			{3, 12, rules.CodeBadPlugin, "", "set exactly one of wasm and process"},
			{3, 21, rules.CodeBadPlugin, "", "sha256 must be 64 hexadecimal digits"},
			{4, 3, rules.CodeBadName, "", `plugin name "Bad"`},
			{4, 23, rules.CodeUnknownField, "", `unknown field "checksum"`},
		}},
		{"when must be boolean", "rules:\n  - {name: a, when: request.path, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 21, rules.CodeExpr, "a", "when: expected bool, but got string"}}},
		{"subject must be a string", "rules:\n  - {name: a, subject: len(request.path), plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 24, rules.CodeExpr, "a", "subject: expected string, but got int"}}},
		{"unknown name", "rules:\n  - {name: a, subject: reqest.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 24, rules.CodeExpr, "a", "subject: unknown name reqest"}}},
		{"syntax error in double-quoted expression", `rules:
  - name: a
    when: "request.path == \"/a\" &&& true"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 37, rules.CodeExpr, "a", `when: unexpected token Operator("&")`}}},
		{"unclosed parenthesis", `rules:
  - name: a
    subject: (request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 25, rules.CodeExpr, "a", `subject: missing ")": the "(" opened at line 3 col 14 is never closed`}}},
		{"unclosed bracket in a block scalar, brackets in strings ignored", `rules:
  - name: a
    when: |
      request.path in ["/a", "(/b"
        ,"/c" && (true)
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{5, 24, rules.CodeExpr, "a", `when: missing "]": the "[" opened at line 4 col 23 is never closed`}}},
		{"bracket closed by the wrong kind", `rules:
  - name: a
    when: (request.path == "/a"] || true
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 32, rules.CodeExpr, "a", `when: "]" cannot close the "(" opened at line 3 col 11 (missing ")")`}}},
		{"closing bracket with nothing open", `rules:
  - name: a
    when: request.path == "/a")
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 31, rules.CodeExpr, "a", `when: ")" closes nothing: no bracket is open here`}}},
		{"error on the second line of a block scalar", `rules:
  - name: a
    when: |
      request.method == "POST" &&
        request.path == 7
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{5, 22, rules.CodeExpr, "a", "when: invalid operation: == (mismatched types string and int)"}}},
		{"error after an escaped quote in a single-quoted scalar", `rules:
  - name: a
    when: 'request.path == ''/a'' && request.hots == ''x'''
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 46, rules.CodeExpr, "a", "when: request has no field hots"}}},
		{"functions are typed", `rules:
  - name: a
    when: cidr(request.ip) || glob(1, "/a") || header(2) == ""
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 11, rules.CodeExpr, "a", "when: not enough arguments to call cidr"}}},
		{"glob takes strings", "rules:\n  - {name: a, when: 'glob(1, \"/a\")', subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 27, rules.CodeExpr, "a", "when: cannot use int as argument (type string) to call glob"}}},
		{"header takes a string", "rules:\n  - {name: a, when: 'header(2) == \"\"', subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 29, rules.CodeExpr, "a", "when: cannot use int as argument (type string) to call header"}}},
		{"bad cidr literal fails at load", `rules:
  - name: a
    when: request.path == "/x" || cidr(request.ip, "10.0.0.0/33")
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 52, rules.CodeExpr, "a", `when: cidr: bad network "10.0.0.0/33"`}}},
		{"bad glob literal fails at load", `rules:
  - name: a
    when: glob(request.path, "/api/[")
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 30, rules.CodeExpr, "a", `when: glob: bad pattern "/api/["`}}},
		{"capitalised header key can never match", `rules:
  - name: a
    when: request.headers["X-Tier"] == "pro"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`, []want{{3, 27, rules.CodeExpr, "a", `header names are lower case`}}},
		{"config errors at their keys", `rules:
  - name: a
    subject: request.ip
    plugin: fixedwindow
    config:
      limit: 0
      window: 1s
      windw: 2s
`, []want{{8, 7, rules.CodeBadConfig, "a", "config: windw: unknown field"}}},
		{"duplicate config key", "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: 1, limit: 2, window: 1s}}\n",
			[]want{{2, 76, rules.CodeDuplicateField, "a", `field "limit" given twice`}}},
		{"config range check at its value", `rules:
  - name: a
    subject: request.ip
    plugin: fixedwindow
    config:
      limit: -1
      window: 1s
`, []want{{6, 14, rules.CodeBadConfig, "a", "config: limit: must be at least 0 (0 blocks the subject), got -1"}}},
		{"missing config", "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow}\n",
			[]want{
				{2, 5, rules.CodeBadConfig, "a", "config: limit: required"},
				{2, 5, rules.CodeBadConfig, "a", "config: window: required"},
			}},
		{"config must be a mapping", "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: [1]}\n",
			[]want{{2, 65, rules.CodeBadValue, "a", "config: want a mapping"}}},
		{"dynamic config expression error", `rules:
  - name: a
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=request.headers["x-tier"] == "pro" ? 10 : nope', window: 1s}
`, []want{{5, 65, rules.CodeExpr, "a", "config.limit: unknown name nope"}}},
		{"dynamic config of a bad type", `rules:
  - name: a
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=request.headers', window: 1s}
`, []want{{5, 23, rules.CodeExpr, "a", "config.limit: want a number, string, boolean or duration, got map[string]string"}}},
		{"yaml syntax error", "rules:\n  - name: a\n   subject: [\n",
			[]want{{2, 0, rules.CodeYAML, "", "did not find expected '-' indicator in the list that starts here"}}},
		{"rules must be a list", "rules: {name: a}\n",
			[]want{{1, 8, rules.CodeBadValue, "", "rules: want a list of rules"}}},
		{"one document per file", "rules: []\n---\nrules: []\n",
			[]want{{2, 1, rules.CodeYAML, "", "only one YAML document per file"}}},
		{"now() is not available", "rules:\n  - {name: a, when: 'now().Hour() > 9', subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 22, rules.CodeExpr, "a", "when: unknown name now"}}},
		{"empty expression", "rules:\n  - {name: a, subject: '  ', plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
			[]want{{2, 24, rules.CodeExpr, "a", "subject: empty expression"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := load(t, tc.src)
			if s != nil {
				t.Fatal("got a Set despite errors")
			}
			checkErrors(t, err, "rules.yaml", tc.wants)
		})
	}
}

func TestEmptyRuleSetsAreValid(t *testing.T) {
	for _, src := range []string{"", "# nothing yet\n", "rules: []\n", "rules:\n", "plugins: {}\nrules: []\n"} {
		s := mustLoad(t, src)
		if len(s.Rules()) != 0 {
			t.Errorf("%q: got %d rules", src, len(s.Rules()))
		}
		if got := s.Match(&rules.Input{Request: rules.Request{IP: "192.0.2.1"}}); len(got) != 0 {
			t.Errorf("%q: matched %v", src, got)
		}
	}
}

func TestParseMissingPath(t *testing.T) {
	_, err := rules.Load(filepath.Join(t.TempDir(), "nope.yaml"), newCatalog())
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("got %v, want a not-exist error", err)
	}
}

func TestDirectoryLoading(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	dir := writeFiles(t, map[string]string{
		"b.yaml": "rules:\n  - {name: second, subject: request.ip, plugin: fixedwindow, config: {limit: 2, window: 1s}}\n",
		"a.yml": `plugins:
  gcra: {wasm: ../plugins/gcra.wasm, sha256: "` + strings.ToUpper(sum) + `"}
  conc: {process: /opt/ruled/conc}
rules:
  - {name: first, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}
`,
		"c.yaml":         "rules:\n  - {name: third, subject: request.ip, plugin: fixedwindow, config: {limit: 3, window: 1s}}\n",
		".hidden.yaml":   "not: [valid",
		"notes.txt":      "not: [valid",
		"sub/skip.yaml":  "not: [valid",
		"empty.yaml":     "",
		"z-comment.yaml": "# only a comment\n",
		"b_test.yaml":    "tests: [not rules",
		"c_test.yml":     "tests: [not rules",
	})
	f, err := rules.Parse(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := rules.Compile(f, newCatalog())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range s.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "first,second,third" {
		t.Errorf("rule order %s, want file-name order first,second,third", got)
	}
	r := s.Rules()[1]
	if r.Pos.File != filepath.Join(dir, "b.yaml") || r.Pos.Line != 2 || r.Pos.Column != 5 {
		t.Errorf("rule position %s", r.Pos)
	}
	plugins := s.Plugins()
	if len(plugins) != 2 {
		t.Fatalf("plugins %+v", plugins)
	}
	wantWasm := filepath.Join(filepath.Dir(dir), "plugins", "gcra.wasm")
	if p := plugins[0]; p.Name != "gcra" || p.Wasm != wantWasm || p.SHA256 != sum || p.Process != "" ||
		p.Pos.Line != 2 || p.Pos.Column != 3 {
		t.Errorf("plugin 0 = %+v, want wasm %s", p, wantWasm)
	}
	if p := plugins[1]; p.Name != "conc" || p.Process != "/opt/ruled/conc" {
		t.Errorf("plugin 1 = %+v", p)
	}
	if len(f.Plugins()) != 2 {
		t.Errorf("Files.Plugins = %+v", f.Plugins())
	}
}

func TestTestFilesAreReadOnlyWhenNamed(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.yaml":      "rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
		"a_test.yaml": "rules:\n  - {name: t, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
	})
	names, err := rules.Sources(dir)
	if err != nil || len(names) != 1 || filepath.Base(names[0]) != "a.yaml" {
		t.Errorf("Sources(dir) = %v, %v; want a.yaml only", names, err)
	}
	named := filepath.Join(dir, "a_test.yaml")
	if names, err := rules.Sources(named); err != nil || len(names) != 1 || names[0] != named {
		t.Errorf("Sources(%s) = %v, %v; want the file itself", named, names, err)
	}
	for _, name := range []string{"x_test.yaml", "/d/x_test.yml", "x_test.yaml.bak"} {
		want := !strings.HasSuffix(name, ".bak")
		if got := rules.IsTestFile(name); got != want {
			t.Errorf("IsTestFile(%q) = %v", name, got)
		}
	}
}

func TestDirectoryErrorsAcrossFiles(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"a.yaml": "plugins:\n  gcra: {wasm: g.wasm}\nrules:\n  - {name: x, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
		"b.yaml": "plugins:\n  gcra: {wasm: h.wasm}\nrules:\n  - {name: x, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n  - {name: y, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}\n",
	})
	_, err := rules.Load(dir, newCatalog())
	list := errorList(t, err)
	// b.yaml has a syntax error, so nothing else of it is parsed, and a.yaml
	// is fine on its own.
	if len(list) != 1 || filepath.Base(list[0].Pos.File) != "b.yaml" || list[0].Pos.Line != 5 || list[0].Code != rules.CodeYAML {
		t.Errorf("got %v", err)
	}

	dir = writeFiles(t, map[string]string{
		"a.yaml": "plugins:\n  gcra: {wasm: g.wasm}\nrules:\n  - {name: x, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
		"b.yaml": "plugins:\n  gcra: {wasm: h.wasm}\nrules:\n  - {name: x, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n",
	})
	_, err = rules.Load(dir, newCatalog())
	checkErrors(t, err, "b.yaml", []want{
		{2, 3, rules.CodeDuplicatePlugin, "", `plugin "gcra" declared twice (first at ` + filepath.Join(dir, "a.yaml") + ":2:3)"},
		{4, 12, rules.CodeDuplicateRule, "x", "duplicate rule name (first defined at " + filepath.Join(dir, "a.yaml") + ":4:12)"},
	})
}

func TestMergeKeysAndAnchors(t *testing.T) {
	s := mustLoad(t, `x-defaults: &d
  plugin: fixedwindow
  on_error: deny
rules:
  - <<: *d
    name: a
    subject: request.ip
    config: &cfg {limit: 3, window: 1s}
  - <<: *d
    name: b
    on_error: local
    subject: request.user
    config: *cfg
`)
	a, _ := s.Rule("a")
	b, _ := s.Rule("b")
	if a == nil || b == nil || a.Plugin != "fixedwindow" || a.OnError != rules.OnErrorDeny || b.OnError != rules.OnErrorLocal ||
		b.Subject != "request.user" || b.RawConfig()["limit"] != 3 {
		t.Fatalf("a = %+v, b = %+v", a, b)
	}
}

func TestLoadExamples(t *testing.T) {
	cat := newCatalog()
	s, err := rules.Load(filepath.Join("..", "examples", "rules"), cat)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := s.Rule("per-ip")
	if !ok || len(s.Rules()) != 1 {
		t.Fatalf("examples/rules: want exactly the per-ip rule, got %d rules", len(s.Rules()))
	}
	sel := s.Match(&rules.Input{Request: rules.Request{IP: "203.0.113.7", Method: "GET", Path: "/"}})
	if len(sel) != 1 || sel[0].Rule != r || sel[0].Subject != "203.0.113.7" || sel[0].Err != nil {
		t.Fatalf("selections %+v", sel)
	}
	want := fixedwindow.Config{Limit: 5, Window: 10 * time.Second}
	if sel[0].Config != want || r.Plugin != "fixedwindow" {
		t.Errorf("per-ip config %+v, want %+v", sel[0].Config, want)
	}
	if _, err := rules.Load(filepath.Join("..", "examples", "rules", "cookbook"), cat); err != nil {
		t.Fatal(err)
	}
}

func TestCompileZeroFilesIsAnEmptySet(t *testing.T) {
	s, err := rules.Compile(&rules.Files{}, newCatalog())
	if err != nil || len(s.Rules()) != 0 || len(s.Plugins()) != 0 || s.Match(nil) != nil {
		t.Fatalf("got %v, %v", s, err)
	}
}
