package rules_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

// TestBuiltinConfigErrorsPointAtTheKey: every built-in's config error is
// reported at the line of the key it names, never at the config: line,
// whether it is the first problem Configure finds or a later one, and
// whether the plugin wraps its errors with its name (leaky, sortedset) or
// not.
func TestBuiltinConfigErrorsPointAtTheKey(t *testing.T) {
	cat := builtins{}
	for _, alg := range builtin.All() {
		cat[alg.Info().Name] = alg
	}
	cases := []struct {
		plugin string
		config []string // the lines under config:
		at     int      // the index in config of the line the error belongs on
		bad    string   // the key the error names
	}{
		{"fixedwindow", []string{"limit: 5", "window: 10s", "offset: 10 foo"}, 2, "offset"},
		{"fixedwindow", []string{"limit: 5", "window: 10s", "offset: 1m"}, 2, "offset"},
		{"rolling", []string{"limit: 5", "window: 10s", "buckets: many"}, 2, "buckets"},
		{"rolling", []string{"limit: 5", "window: 10s", "buckets: 0"}, 2, "buckets"},
		{"tokenbucket", []string{"rate: 10", "burst: 20", "per: 10 foo"}, 2, "per"},
		{"tokenbucket", []string{"rate: 10", "burst: 0", "per: 1s"}, 1, "burst"},
		{"leaky", []string{"capacity: 5", "rate: 10", "per: 10 foo"}, 2, "per"},
		{"leaky", []string{"capacity: 5", "rate: 10", "mode: drop"}, 2, "mode"},
		{"sortedset", []string{"limit: 5", "window: 10s", "min_gap: 10 foo"}, 2, "min_gap"},
		{"sortedset", []string{"limit: 5", "window: 10s", "min_gap: -1s"}, 2, "min_gap"},
		{"sortedset", []string{"limit: 5", "window: 10s", "also:", "  - {limit: -1, window: 1m}"}, 3, "also[0]"},
	}
	for _, tc := range cases {
		t.Run(tc.plugin+"/"+tc.bad, func(t *testing.T) {
			src := fmt.Sprintf("rules:\n  - name: r\n    when: request.method == \"POST\"\n    subject: request.ip\n    plugin: %s\n    config:\n      %s\n",
				tc.plugin, strings.Join(tc.config, "\n      "))
			keyLine := 7 + tc.at // config: is line 6
			dir := writeFiles(t, map[string]string{"rules.yaml": src})
			_, err := rules.Load(filepath.Join(dir, "rules.yaml"), cat)
			list := errorList(t, err)
			if len(list) != 1 {
				t.Fatalf("got %d errors, want 1:\n%v", len(list), err)
			}
			e := list[0]
			if e.Code != rules.CodeBadConfig || e.Pos.Line != keyLine || !strings.HasPrefix(e.Message, "config: "+tc.bad+": ") {
				t.Errorf("got %s, want line %d, code %s, message config: %s: ...\n%s", e, keyLine, rules.CodeBadConfig, tc.bad, src)
			}
		})
	}
}
