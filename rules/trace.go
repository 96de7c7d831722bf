package rules

import "slices"

// TraceEntry is one rule's part in a Trace.
type TraceEntry struct {
	Rule *Rule
	// Matched reports whether the rule's when held (and no earlier rule
	// with stop: true matched).
	Matched bool
	// Skipped reports that an earlier matching rule had stop: true.
	Skipped bool
	// ReplacedBy names the matching rule that replaces this one, if any:
	// it matched but does not apply.
	ReplacedBy string
	// Subject is the computed subject of a matching rule.
	Subject string
	// Config is the config the plugin would receive, dynamic values
	// evaluated, for a matching rule.
	Config map[string]any
	// Err is an error evaluating the rule for this input.
	Err error
}

// Trace evaluates every rule against in, in file order, and says for each
// whether it matches, with its subject and resolved config. It is the
// offline explanation behind `ruled eval`: thorough, not fast (it visits
// every rule, without the index Match uses), and it runs no plugin.
func (s *Set) Trace(in *Input) []TraceEntry {
	st := s.begin(in)
	defer s.release(st)
	out := make([]TraceEntry, 0, len(s.rules))
	stopped := false
	for _, r := range s.rules {
		e := TraceEntry{Rule: r}
		if stopped {
			e.Skipped = true
			out = append(out, e)
			continue
		}
		st.startRule()
		ok, err := r.matches(st)
		if err != nil || !ok {
			e.Err = err
			out = append(out, e)
			continue
		}
		e.Matched = true
		sel := r.select1(st)
		e.Subject, e.Err = sel.Subject, sel.Err
		if sel.Err == nil {
			if r.dyn != nil {
				e.Config = r.dyn.resolve(st.vals)
			} else {
				e.Config = r.RawConfig()
			}
		}
		out = append(out, e)
		stopped = r.Stop
	}
	for i := range out {
		if !out[i].Matched {
			continue
		}
		for j := range out {
			if out[j].Matched && slices.Contains(out[j].Rule.replaced, out[i].Rule) {
				out[i].ReplacedBy = out[j].Rule.Name
				break
			}
		}
	}
	return out
}
