package envoyconfig

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

// entry is one entry of a request descriptor.
type entry struct{ key, value string }

// envoyLookup is a model of envoy ratelimit's config lookup (GetLimit in
// src/config/config_impl.go): the node whose rate limit applies to the
// entries, or nil. It works on envoy's composite keys (key, key_value),
// as envoy does.
func envoyLookup(cfg *domainConfig, entries []entry) (node *descriptor, shared map[int]string) {
	level := cfg.descriptors
	for i, e := range entries {
		composite := e.key + "_" + e.value
		var next *descriptor
		viaWildcard := false
		for _, d := range level {
			if d.compositeKey() == composite {
				next = d
			}
		}
		if next == nil {
			for _, d := range level { // in the order written
				if d.wildcard() && strings.HasPrefix(composite, strings.TrimSuffix(d.compositeKey(), "*")) {
					next, viaWildcard = d, true
					break
				}
			}
		}
		if next == nil {
			for _, d := range level {
				if d.compositeKey() == e.key {
					next = d
				}
			}
		}
		if next != nil && viaWildcard && next.share {
			if shared == nil {
				shared = map[int]string{}
			}
			shared[i] = next.value
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			node = next
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		level = next.children
	}
	return node, shared
}

// envoyCounter is what envoy keys a descriptor's counter by (besides the
// window): its entries, a shared wildcard's value as its pattern.
func envoyCounter(entries []entry, shared map[int]string) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		v := e.value
		if p, ok := shared[i]; ok {
			v = p
		}
		parts[i] = strconv.Quote(e.key) + ":" + strconv.Quote(v)
	}
	return strings.Join(parts, ",")
}

// randomConfig writes a random envoy config of domain "d": keys a, b, c
// (no '_', so that envoy's composite keys never collide), values among
// exact ones, wildcards with overlapping prefixes, the catch-all "*" and
// values with '/' and '%'.
func randomConfig(r *rand.Rand) string {
	values := []string{"", "", "x", "y", "xy", "x*", "xy*", "*", "p/q", "%2F", "p/*"}
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	var level func(indent string, path []string, depth int)
	level = func(indent string, path []string, depth int) {
		seen := map[string]bool{}
		for range 1 + r.IntN(4) {
			var free []string
			for _, k := range []string{"a", "b", "c"} {
				if !strings.Contains(strings.Join(path, ","), k) {
					free = append(free, k)
				}
			}
			k, v := free[r.IntN(len(free))], values[r.IntN(len(values))]
			if seen[k+"="+v] {
				continue
			}
			seen[k+"="+v] = true
			fmt.Fprintf(&b, "%s- key: %s\n", indent, k)
			if v != "" {
				fmt.Fprintf(&b, "%s  value: %s\n", indent, strconv.Quote(v))
				if strings.HasSuffix(v, "*") && r.IntN(3) == 0 {
					fmt.Fprintf(&b, "%s  share_threshold: true\n", indent)
				}
			}
			if r.IntN(5) < 3 {
				fmt.Fprintf(&b, "%s  rate_limit:\n", indent)
				if r.IntN(6) == 0 {
					fmt.Fprintf(&b, "%s    unlimited: true\n", indent)
				} else {
					fmt.Fprintf(&b, "%s    unit: second\n%s    requests_per_unit: %d\n", indent, indent, 1+r.IntN(5))
				}
				name := ""
				if r.IntN(3) == 0 {
					name = []string{"n1", "n2"}[r.IntN(2)]
					fmt.Fprintf(&b, "%s    name: %s\n", indent, name)
				}
				if other := []string{"n1", "n2"}[r.IntN(2)]; r.IntN(4) == 0 && other != name {
					fmt.Fprintf(&b, "%s    replaces: [{name: %s}]\n", indent, other)
				}
				if r.IntN(5) == 0 {
					fmt.Fprintf(&b, "%s  shadow_mode: true\n", indent)
				}
			}
			if depth < 3 && len(free) > 1 && r.IntN(2) == 0 {
				fmt.Fprintf(&b, "%s  descriptors:\n", indent)
				level(indent+"    ", append(path, k), depth+1)
			}
		}
	}
	level("  ", nil, 1)
	return b.String()
}

// randomEntries is a random request descriptor: keys may repeat, values
// are the config's or near them.
func randomEntries(r *rand.Rand) []entry {
	values := []string{"", "x", "y", "xy", "xyz", "x*", "xy*", "*", "p/q", "p/q/r", "%2F", "/", "p/*", "z",
		"p", "q", "p/b=p", "p/b=q", "p/c=p", "p/c=q"} // a=p/b=p, b=q and a=p, b=p/b=q: one subject unless escaped
	es := make([]entry, 1+r.IntN(3))
	for i := range es {
		es[i] = entry{[]string{"a", "b", "c"}[r.IntN(3)], values[r.IntN(len(values))]}
	}
	return es
}

// attrsOf is what ruled's Envoy rate limit service gives rules for a
// descriptor of domain d (docs/http.md).
func attrsOf(entries []entry, override bool) map[string]string {
	attrs := map[string]string{}
	keys := make([]string, len(entries))
	for i, e := range entries {
		attrs[e.key] = e.value
		keys[i] = e.key
	}
	attrs["domain"] = "d"
	attrs["descriptor_keys"] = strings.Join(keys, ",")
	if override {
		attrs["limit_override"], attrs["limit_override_window"] = "7", "1m0s"
	}
	return attrs
}

// TestRulesSelectWhatEnvoySelects translates random envoy configs, loads
// the rules with ruled's loader and, for random requests of one to three
// descriptors, checks that the rules that apply to each descriptor (after
// replaces) are exactly the one of the limit envoy applies, and that two
// descriptors share a subject exactly when envoy counts them together.
func TestRulesSelectWhatEnvoySelects(t *testing.T) {
	seed := uint64(1)
	if s := os.Getenv("ENVOYIMPORT_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	r := rand.New(rand.NewPCG(seed, 2))
	configs, requests := 300, 200
	if testing.Short() {
		configs = 50
	}
	for c := range configs {
		src := randomConfig(r)
		g, ts := translate([]Source{{Name: "d.yaml", Content: []byte(src)}}, Options{})
		if err := g.errs.Err(); err != nil {
			t.Fatalf("config %d: %v\n%s", c, err, src)
		}
		tr := ts[0]
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, tr.file.Name), tr.file.Content, 0o644); err != nil {
			t.Fatal(err)
		}
		set, err := rules.Load(dir, builtinCatalog())
		if err != nil {
			t.Fatalf("config %d: the rules do not load: %v\n%s\n%s", c, err, src, tr.file.Content)
		}
		ruleOf := map[*rateLimit]string{} // each descriptor's rate limit → its rule
		for _, rl := range tr.rules {
			ruleOf[rl.limit] = rl.name
		}
		overrideRule := g.override["d"]
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("config %d: %s\n--- envoy config\n%s--- rules\n%s", c, fmt.Sprintf(format, args...), src, tr.file.Content)
		}
		subjects := map[string]string{} // rule and subject → envoy counter
		counters := map[string]string{} // envoy rule and counter → subject
		for range requests {
			descs := make([][]entry, 1+r.IntN(3))
			overrides := make([]bool, len(descs))
			lists := make([][]rules.Selection, len(descs))
			for i := range descs {
				descs[i] = randomEntries(r)
				overrides[i] = r.IntN(10) == 0
				lists[i] = set.AppendMatchUnreplaced(nil, &rules.Input{Attrs: attrsOf(descs[i], overrides[i])})
			}
			lists = set.DropReplaced(lists)

			// envoy: each descriptor's limit, then replaces across them
			nodes := make([]*descriptor, len(descs))
			shares := make([]map[int]string, len(descs))
			replacing := map[string]bool{}
			for i, es := range descs {
				if overrides[i] {
					continue
				}
				nodes[i], shares[i] = envoyLookup(tr.cfg, es)
				if n := nodes[i]; n != nil {
					for _, ref := range n.limit.replaces {
						replacing[ref.name] = true
					}
				}
			}
			for i, es := range descs {
				want := ""
				switch n := nodes[i]; {
				case overrides[i]:
					want = overrideRule
				case n != nil && !(n.limit.name != "" && replacing[n.limit.name]):
					want = ruleOf[n.limit]
				}
				var got []string
				for _, sel := range lists[i] {
					if sel.Err != nil {
						fail("descriptor %v: rule %s: %v", es, sel.Rule.Name, sel.Err)
					}
					got = append(got, sel.Rule.Name)
				}
				if (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
					fail("descriptor %v (override %v) of request %v: envoy applies %q, the rules that apply are %q", es, overrides[i], descs, want, got)
				}
				if want == "" || (nodes[i] != nil && nodes[i].limit.unlimited) {
					continue
				}
				counter := envoyCounter(es, shares[i])
				if overrides[i] {
					if hasRepeatedKey(es) {
						continue // attrs keep the last value of a key: documented
					}
					counter = "override " + counter
				}
				subject := lists[i][0].Subject
				if prev, ok := subjects[want+"\x00"+subject]; ok && prev != counter {
					fail("rule %s has subject %q for envoy counters %s and %s", want, subject, prev, counter)
				}
				if prev, ok := counters[want+"\x00"+counter]; ok && prev != subject {
					fail("envoy counter %s of rule %s has subjects %q and %q", counter, want, prev, subject)
				}
				subjects[want+"\x00"+subject], counters[want+"\x00"+counter] = counter, subject
			}
		}
	}
}

func hasRepeatedKey(es []entry) bool {
	seen := map[string]bool{}
	for _, e := range es {
		if seen[e.key] {
			return true
		}
		seen[e.key] = true
	}
	return false
}

// TestSubjectsTellValuesApart: values with the separator of the subject
// in them must not make two descriptors share a counter.
func TestSubjectsTellValuesApart(t *testing.T) {
	src := `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
        descriptors:
          - key: c
            rate_limit: {unit: second, requests_per_unit: 1}
`
	files, _, err := Translate([]Source{{Name: "d.yaml", Content: []byte(src)}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, files[0].Name), files[0].Content, 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(dir, builtinCatalog())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]entry{}
	for _, c := range []struct {
		es       []entry
		override bool
	}{
		{es: []entry{{"a", "p/b=p"}, {"b", "q"}}},
		{es: []entry{{"a", "p"}, {"b", "p/b=q"}}},
		{es: []entry{{"a", "p%2Fb=p"}, {"b", "q"}}},
		{es: []entry{{"a", "p"}, {"b", ""}}},
		{es: []entry{{"a", ""}, {"b", "p"}}},
		{es: []entry{{"a", "x"}, {"b", "y/c=z"}, {"c", "w"}}},
		{es: []entry{{"a", "x"}, {"b", "y"}, {"c", "z/c=w"}}},
		{es: []entry{{"a", "x/b=y"}, {"b", "z"}, {"c", "w"}}},
		{es: []entry{{"a", "x"}, {"b", "y/b=z"}, {"c", "w"}}},
		// with an override, keys too are the request's
		{es: []entry{{"a", "p=q"}, {"b", "r"}}, override: true},
		{es: []entry{{"a", "p"}, {"b", "q=r"}}, override: true},
		{es: []entry{{"a=p", "q"}, {"b", "r"}}, override: true},
		{es: []entry{{"a", "p/b=r"}}, override: true},
		{es: []entry{{"a", "p"}, {"b", "r"}}, override: true},
	} {
		es := c.es
		sels := set.Match(&rules.Input{Attrs: attrsOf(es, c.override)})
		if len(sels) != 1 || sels[0].Err != nil {
			t.Fatalf("%v: want one selection, got %+v", es, sels)
		}
		key := sels[0].Rule.Name + " " + sels[0].Subject
		if prev, dup := seen[key]; dup {
			t.Errorf("%v and %v share rule and subject %q", prev, es, key)
		}
		seen[key] = es
	}
}
