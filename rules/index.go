package rules

import (
	"cmp"
	"slices"
)

// A rule set usually has many rules of the form `request.path == "/x" &&
// ...`, of which few can match any one request. The index maps such an
// equality (or `in` list) to the rules it guards, so that Match visits only
// the rules whose guard value equals the request's, plus the rules it
// could not index, in file order.

// maxIndexFields bounds the fields indexed per Set (and the lists Match
// merges); rules guarded by other fields are visited every time.
const maxIndexFields = 8

type ruleIndex struct {
	always []int32 // rules visited on every match, ascending
	fields []fieldIndex
}

type fieldIndex struct {
	f     field
	rules map[string][]int32 // value → rules, ascending
}

// indexKey picks the guard a rule is indexed by: an equality or `in` list
// among its guards, on the most selective field.
func indexKey(r *Rule) (guard, bool) {
	rank := func(k fieldKind) int {
		switch k {
		case fieldPath:
			return 0
		case fieldHost:
			return 1
		case fieldHeader, fieldQuery, fieldAttr:
			return 2
		case fieldUser, fieldIP:
			return 3
		}
		return 4 // method
	}
	best, found := guard{}, false
	for _, g := range r.when.guards {
		if g.op != opEq && g.op != opIn {
			continue
		}
		if !found || rank(g.f.kind) < rank(best.f.kind) {
			best, found = g, true
		}
	}
	return best, found
}

func buildIndex(rs []*Rule) ruleIndex {
	keys := make([]guard, len(rs))
	indexed := make([]bool, len(rs))
	count := map[field]int{}
	first := map[field]int{}
	for i, r := range rs {
		if g, ok := indexKey(r); ok {
			keys[i], indexed[i] = g, true
			if _, seen := first[g.f]; !seen {
				first[g.f] = i
			}
			count[g.f]++
		}
	}
	// Keep the most used fields.
	fields := make([]field, 0, len(count))
	for f := range count {
		fields = append(fields, f)
	}
	slices.SortFunc(fields, func(a, b field) int {
		return cmp.Or(cmp.Compare(count[b], count[a]), cmp.Compare(first[a], first[b]))
	})
	if len(fields) > maxIndexFields {
		fields = fields[:maxIndexFields]
	}
	var idx ruleIndex
	slot := map[field]int{}
	for i, f := range fields {
		slot[f] = i
		idx.fields = append(idx.fields, fieldIndex{f: f, rules: map[string][]int32{}})
	}
	for i := range rs {
		s, ok := slot[keys[i].f]
		if !indexed[i] || !ok {
			idx.always = append(idx.always, int32(i))
			continue
		}
		m := idx.fields[s].rules
		if keys[i].op == opEq {
			m[keys[i].s] = append(m[keys[i].s], int32(i))
			continue
		}
		for v := range keys[i].set {
			m[v] = append(m[v], int32(i))
		}
	}
	return idx
}

// candidates is an iterator over the rules that may match one input, in
// file order: a merge of the always list and the lists of the input's
// values of the indexed fields.
type candidates struct {
	lists [maxIndexFields + 1][]int32
	n     int
}

func (idx *ruleIndex) candidates(r *Request, attrs map[string]string) candidates {
	var c candidates
	if len(idx.always) > 0 {
		c.lists[c.n] = idx.always
		c.n++
	}
	for i := range idx.fields {
		if l := idx.fields[i].rules[idx.fields[i].f.get(r, attrs)]; len(l) > 0 {
			c.lists[c.n] = l
			c.n++
		}
	}
	return c
}

// next returns the next candidate rule's index, or false when there are
// no more.
func (c *candidates) next() (int32, bool) {
	best := -1
	for i := range c.n {
		if len(c.lists[i]) > 0 && (best < 0 || c.lists[i][0] < c.lists[best][0]) {
			best = i
		}
	}
	if best < 0 {
		return 0, false
	}
	v := c.lists[best][0]
	c.lists[best] = c.lists[best][1:]
	return v, true
}
