package yamlnode_test

import (
	"fmt"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ruled-dev/ruled/internal/yamlnode"
)

func TestPairs(t *testing.T) {
	var doc yaml.Node
	src := "base: &b {a: 1, b: 2}\nm:\n  <<: *b\n  b: 3\n  c: 4\n  c: 5\n  ? [x]\n  : 6\n  ~: 7\n"
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	m := doc.Content[0].Content[3]
	var bad []string
	kvs := yamlnode.Pairs(m, func(k *yaml.Node, duplicate bool) {
		bad = append(bad, fmt.Sprintf("%d:%d dup=%v", k.Line, k.Column, duplicate))
	})
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Key.Value+"="+kv.Val.Value)
	}
	if s := strings.Join(got, " "); s != "b=3 c=4 a=1" {
		t.Errorf("pairs %q, want the explicit keys first, then the merged key the explicit ones do not override", s)
	}
	if s := strings.Join(bad, ", "); s != "6:3 dup=true, 7:5 dup=false, 9:3 dup=false" {
		t.Errorf("bad keys %q, want the duplicate c, the list key and the null key", s)
	}
	if !yamlnode.IsNull(nil) || yamlnode.IsNull(m) {
		t.Error("IsNull")
	}
}

func TestDescribe(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(`[{a: 1}, [1], "say \"hi\"", 7]`), &doc); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range doc.Content[0].Content {
		got = append(got, yamlnode.Describe(n))
	}
	if want := []string{"a mapping", "a list", `"say \"hi\""`, `"7"`}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Describe: %q, want %q", got, want)
	}
}
