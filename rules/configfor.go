package rules

import "github.com/ruled-dev/ruled/sdk"

// ConfigFor returns the config r's plugin receives for in: the rule's
// static config, or its dynamic values evaluated against in (nil: an empty
// request). Neither the rule's when nor its subject is evaluated. r must
// be a rule of s. The admin API peeks at a rule's counters with the config
// of an empty request.
func (s *Set) ConfigFor(r *Rule, in *Input) (sdk.Config, error) {
	if r.dyn == nil {
		return r.config, nil
	}
	st := s.begin(in)
	defer s.release(st)
	st.startRule()
	return r.dynamicConfig(st)
}
