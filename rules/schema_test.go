package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// schemaPath is the JSON Schema of rule files, for editors.
const schemaPath = "../docs/rule-file.schema.json"

// loadSchema reads the schema as a JSON value, for the checks of its
// content against the parser.
func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	f, err := os.Open(schemaPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", schemaPath, err)
	}
	s, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is not an object", schemaPath)
	}
	return s
}

// compileSchema compiles the schema, or the subschema at the JSON pointer
// fragment (like "#/$defs/name"), as JSON Schema 2020-12.
func compileSchema(t *testing.T, fragment string) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	sch, err := c.Compile(schemaPath + fragment)
	if err != nil {
		t.Fatalf("compiling %s%s: %v", schemaPath, fragment, err)
	}
	return sch
}

// at returns the value at the path of keys in s, failing the test when
// there is none.
func at(t *testing.T, s any, keys ...string) any {
	t.Helper()
	for i, k := range keys {
		m, ok := s.(map[string]any)
		if !ok || m[k] == nil {
			t.Fatalf("the schema has no %s", strings.Join(keys[:i+1], "."))
		}
		s = m[k]
	}
	return s
}

func sortedKeys(t *testing.T, s any, keys ...string) []string {
	t.Helper()
	m, ok := at(t, s, keys...).(map[string]any)
	if !ok {
		t.Fatalf("the schema's %s is not an object", strings.Join(keys, "."))
	}
	return slices.Sorted(maps.Keys(m))
}

// TestSchemaMatchesTheParser: the schema names exactly the keys the parser
// accepts at each level, the same on_error values, name and sha256
// patterns, lease bound and required rule keys, so that it cannot drift
// from what ruled reads.
func TestSchemaMatchesTheParser(t *testing.T) {
	s := loadSchema(t)
	if got := at(t, s, "$schema"); got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema %v, want JSON Schema 2020-12", got)
	}
	if got := compileSchema(t, "").DraftVersion; got != 2020 {
		t.Errorf("compiled as draft %d, want 2020", got)
	}
	for _, c := range []struct {
		what string
		path []string
		want []string
	}{
		{"top-level keys", []string{"properties"}, topFields},
		{"rule keys", []string{"$defs", "rule", "properties"}, ruleFields},
		{"plugin declaration keys", []string{"$defs", "plugin", "properties"}, pluginFields},
	} {
		if got, want := sortedKeys(t, s, c.path...), slices.Sorted(slices.Values(c.want)); !slices.Equal(got, want) {
			t.Errorf("%s: the schema has %v, the parser %v", c.what, got, want)
		}
	}
	if got := sortedKeys(t, s, "patternProperties"); !slices.Equal(got, []string{"^x-"}) {
		t.Errorf("top-level pattern keys %v, want the x- extension keys alone", got)
	}
	for _, path := range [][]string{{"additionalProperties"}, {"$defs", "rule", "additionalProperties"}, {"$defs", "plugin", "additionalProperties"}} {
		if got := at(t, s, path...); got != false {
			t.Errorf("%s is %v: unknown keys are errors for ruled", strings.Join(path, "."), got)
		}
	}
	if got, want := fmt.Sprint(at(t, s, "$defs", "rule", "properties", "on_error", "enum")), fmt.Sprint([]OnError{OnErrorAllow, OnErrorDeny, OnErrorLocal}); got != want {
		t.Errorf("on_error enum %s, want %s", got, want)
	}
	var refused []string
	for k, v := range at(t, s, "$defs", "rule", "else", "properties").(map[string]any) {
		if v == false {
			refused = append(refused, k)
		}
	}
	slices.Sort(refused)
	if want := slices.Sorted(slices.Values(exemptRefuses)); !slices.Equal(refused, want) {
		t.Errorf("the schema refuses %v on an exempt rule, the parser %v", refused, want)
	}
	if got := fmt.Sprint(at(t, s, "$defs", "rule", "properties", "lease", "maximum")); got != strconv.Itoa(MaxLease) {
		t.Errorf("lease maximum %s, want %d", got, MaxLease)
	}

	// The name and sha256 subschemas agree with the parser's checks.
	name := compileSchema(t, "#/$defs/name")
	for _, n := range []string{"a", "per-ip", "a_b-9", "9lives", strings.Repeat("a", 63), strings.Repeat("a", 64), "",
		"-a", "_a", "A", "per ip", "é", "a.b", "a\n"} {
		if got, want := name.Validate(n) == nil, validName(n); got != want {
			t.Errorf("name %q: the schema says %v, the parser %v", n, got, want)
		}
	}
	sha := compileSchema(t, "#/$defs/plugin/properties/sha256")
	for _, sum := range []string{strings.Repeat("a", 64), strings.Repeat("F", 64), strings.Repeat("0", 63), strings.Repeat("0", 65), strings.Repeat("g", 64)} {
		// The parser lower-cases the pin before it checks it.
		if got, want := sha.Validate(sum) == nil, isHex64(strings.ToLower(sum)); got != want {
			t.Errorf("sha256 %q: the schema says %v, the parser %v", sum, got, want)
		}
	}

	// A rule without a key the schema requires is a missing-field error,
	// and only those. subject and plugin are required of rules that are
	// not exempt (the schema's then).
	required := map[string]bool{}
	for _, k := range at(t, s, "$defs", "rule", "required").([]any) {
		required[k.(string)] = true
	}
	for _, k := range at(t, s, "$defs", "rule", "then", "required").([]any) {
		required[k.(string)] = true
	}
	full := map[string]string{"name": "a", "when": "true", "subject": "request.ip", "plugin": "fixedwindow",
		"config": "{limit: 1, window: 1s}", "on_error": "deny", "shadow": "false", "stop": "false", "deny_cache": "true", "lease": "0",
		"exempt": "false", "replaces": "[]", "detailed_metric": "false"}
	dir := t.TempDir()
	for _, drop := range ruleFields {
		var b strings.Builder
		b.WriteString("rules:\n  -")
		for _, k := range ruleFields {
			if k != drop {
				fmt.Fprintf(&b, " %s: %s\n   ", k, full[k])
			}
		}
		path := filepath.Join(dir, drop+".yaml")
		if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Parse(path)
		var list ErrorList
		errors.As(err, &list)
		missing := slices.ContainsFunc(list, func(e *Error) bool { return e.Code == CodeMissingField })
		if missing != required[drop] {
			t.Errorf("without %s: parse error %v; the schema requires it: %v", drop, err, required[drop])
		}
	}
}

// shapeCodes are the parse errors a file's shape shows, which the schema
// must catch too. The others (duplicate names, expressions, plugins'
// configs) are beyond a schema.
var shapeCodes = []string{CodeUnknownField, CodeMissingField, CodeBadValue, CodeBadName, CodeBadPlugin, CodeBadOnError}

// yamlAsJSON decodes YAML file content into the JSON value editors see:
// YAML's maps, lists and ints go through JSON so that the validator gets
// map[string]any, []any and json.Number.
func yamlAsJSON(content []byte) (any, error) {
	var doc any
	if err := yaml.Unmarshal(content, &doc); err != nil {
		return nil, err
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(b))
}

// parseVerdict parses the rule file at path and returns its shape errors.
func parseVerdict(path string) []string {
	_, err := Parse(path)
	var out []string
	var list ErrorList
	errors.As(err, &list)
	for _, e := range list {
		if slices.Contains(shapeCodes, e.Code) {
			out = append(out, e.Error())
		}
	}
	return out
}

// isRuleFile reports whether YAML content is meant as a rule file: its
// top-level mapping has plugins or rules.
func isRuleFile(content []byte) bool {
	var top map[string]any
	if yaml.Unmarshal(content, &top) != nil {
		return false
	}
	_, p := top["plugins"]
	_, r := top["rules"]
	return p || r
}

// yamlBlock matches a fenced YAML block of a Markdown file.
var yamlBlock = regexp.MustCompile("(?ms)^```ya?ml\n(.*?)^```")

// TestExampleRuleFilesAgreeWithTheSchema validates every rule file of the
// repository (examples/, cmd/ruled/testdata/, rules/testdata/, and the
// YAML blocks of the docs that are whole rule files) against the schema:
// the schema accepts exactly the files ruled parses without a shape error.
// The examples, meant to be valid, must be.
func TestExampleRuleFilesAgreeWithTheSchema(t *testing.T) {
	schema := compileSchema(t, "")
	type sample struct {
		name      string
		content   []byte
		mustPass  bool
		fromDocs  bool
		parsePath string
	}
	var samples []sample
	for _, root := range []string{"../examples", "../cmd/ruled/testdata", "testdata"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || (filepath.Ext(path) != ".yaml" && filepath.Ext(path) != ".yml") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if isRuleFile(b) {
				samples = append(samples, sample{name: path, content: b, mustPass: !strings.HasPrefix(path, "testdata"), parsePath: path})
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	docs, _ := filepath.Glob("../docs/*.md")
	dir := t.TempDir()
	for _, doc := range append(docs, "../README.md") {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range yamlBlock.FindAllSubmatch(b, -1) {
			if !isRuleFile(m[1]) {
				continue
			}
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", filepath.Base(doc), i))
			if err := os.WriteFile(path, m[1], 0o600); err != nil {
				t.Fatal(err)
			}
			samples = append(samples, sample{name: fmt.Sprintf("%s, YAML block %d", doc, i+1), content: m[1], fromDocs: true, parsePath: path})
		}
	}
	var examples, fromDocs int
	for _, s := range samples {
		v, err := yamlAsJSON(s.content)
		if err != nil {
			t.Errorf("%s: %v", s.name, err)
			continue
		}
		got := schema.Validate(v)
		want := parseVerdict(s.parsePath)
		if (got == nil) != (len(want) == 0) {
			t.Errorf("%s: the schema and the parser disagree:\n schema: %v\n parser: %v", s.name, got, want)
		}
		if s.mustPass && got != nil {
			t.Errorf("%s: an example the schema rejects: %v", s.name, got)
		}
		if s.fromDocs {
			fromDocs++
		} else if s.mustPass {
			examples++
		}
	}
	if examples < 7 || fromDocs < 3 {
		t.Errorf("validated %d example files and %d doc blocks; the walk misses some", examples, fromDocs)
	}
}

// TestSchemaAgreesOnMistakes: for files with one mistake each, and their
// fixed versions, the schema and the parser agree.
func TestSchemaAgreesOnMistakes(t *testing.T) {
	schema := compileSchema(t, "")
	const good = "  - {name: a, subject: request.ip, plugin: fixedwindow, config: {limit: 1, window: 1s}}\n"
	cases := map[string]bool{ // content → valid
		"":                         true,
		"# only a comment\n":       true,
		"rules:\n":                 true,
		"rules: []\nplugins: {}\n": true,
		"x-defaults: &d {plugin: fixedwindow}\nrules:\n  - {<<: *d, name: a, subject: request.ip}\n": true,
		"rules:\n" + good: true,
		"rulez: []\n":     false,
		"- a\n":           false,
		"rules: {}\n":     false,
		"rules:\n  - 1\n": false,
		"rules:\n  - {subject: request.ip, plugin: fixedwindow}\n":                           false,
		"rules:\n  - {name: a, plugin: fixedwindow}\n":                                       false,
		"rules:\n  - {name: a, subject: request.ip}\n":                                       false,
		"rules:\n  - {name: A, subject: request.ip, plugin: fixedwindow}\n":                  false,
		"rules:\n  - {name: a, subjet: request.ip, plugin: fixedwindow}\n":                   false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, on_error: maybe}\n": false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, on_error: local}\n": true,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, shadow: yes}\n":     false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, stop: true}\n":      true,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, lease: -1}\n":       false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, lease: 1000001}\n":  false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, lease: 1000000}\n":  true,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, config: [1]}\n":     false,
		"rules:\n  - {name: a, when: 'request.ip == \"10.0.0.1\"', exempt: true}\n":          true,
		"rules:\n  - {name: a, exempt: true, plugin: fixedwindow}\n":                         false,
		"rules:\n  - {name: a, exempt: true, lease: 0}\n":                                    false,
		"rules:\n  - {name: a, exempt: false}\n":                                             false,
		"rules:\n  - {name: a, subject: request.ip, plugin: fixedwindow, replaces: [B]}\n":   false,
		"plugins:\n  mine: {wasm: m.wasm}\n":                                                 true,
		"plugins:\n  mine: {wasm: m.wasm, process: ./m}\n":                                   false,
		"plugins:\n  mine: {sha256: " + strings.Repeat("a", 64) + "}\n":                      false,
		"plugins:\n  mine: {process: ./m, sha256: " + strings.Repeat("a", 64) + "}\n":        true,
		"plugins:\n  mine: {process: ./m, sha256: abc}\n":                                    false,
		"plugins:\n  mine: {process: ./m, checksum: abc}\n":                                  false,
		"plugins:\n  Mine: {process: ./m}\n":                                                 false,
		"plugins:\n  mine: ./m\n":                                                            false,
	}
	dir := t.TempDir()
	i := 0
	for content, valid := range cases {
		i++
		path := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		v, err := yamlAsJSON([]byte(content))
		if err != nil {
			t.Fatalf("%q: %v", content, err)
		}
		got := schema.Validate(v)
		want := parseVerdict(path)
		if (got == nil) != valid || (len(want) == 0) != valid {
			t.Errorf("%q: want valid=%v; schema says %v, parser %v", content, valid, got, want)
		}
	}
}
