package sdk

import (
	"fmt"
	"strings"
	"time"
)

// Shape declares a script's reply: an array with exactly one element per
// name, in order. A script declares it in Script.Returns; the host then
// rejects any other reply with an error that names the plugin, the script
// and what was wrong, before the plugin sees it. Plugins read elements by
// name (Int, Decision), so a reply never means what its author did not
// declare.
//
// A Shape is immutable and safe for concurrent use. Build it once, in a
// package variable, with NewShape.
type Shape struct {
	names []string
	// at holds the positions of the decision fields (decisionFields
	// order), -1 where the shape has no such field.
	at [len(decisionFields)]int
	// decides: every decision field but the optional delay and window is
	// named.
	decides bool
}

// The names a decision reply uses (Shape.Decision). Times are integer
// microseconds; allowed is 1 or 0.
const (
	FieldAllowed    = "allowed"
	FieldGranted    = "granted"
	FieldLimit      = "limit"
	FieldRemaining  = "remaining"
	FieldReset      = "reset_us"
	FieldRetryAfter = "retry_after_us"
	FieldDelay      = "delay_us"
	// FieldWindow, where declared, is the decision's window, in place of
	// the one the plugin passes (ThenDecide): for a plugin whose script
	// picks among several windows.
	FieldWindow = "window_us"
)

// decisionFields are the fields Shape.Decision reads, the optional ones
// (FieldDelay, FieldWindow) last.
var decisionFields = [...]string{FieldAllowed, FieldGranted, FieldLimit, FieldRemaining, FieldReset, FieldRetryAfter, FieldDelay, FieldWindow}

// requiredFields is how many of decisionFields a decision needs.
const requiredFields = len(decisionFields) - 2

// DecisionShape is the reply of a script that returns a decision:
//
//	{allowed, granted, limit, remaining, reset_us, retry_after_us}
var DecisionShape = NewShape(FieldAllowed, FieldGranted, FieldLimit, FieldRemaining, FieldReset, FieldRetryAfter)

// NewShape returns the shape of an array reply whose elements are named
// names, in order. Names are lower-case letters, digits and '_', each used
// once; the host refuses a plugin that declares other names (CheckNames).
func NewShape(names ...string) *Shape {
	s := &Shape{names: append([]string(nil), names...), decides: true}
	for i, f := range decisionFields {
		s.at[i] = s.index(f)
		if s.at[i] < 0 && i < requiredFields {
			s.decides = false
		}
	}
	return s
}

// Names returns the declared element names, in order. The slice is the
// caller's.
func (s *Shape) Names() []string { return append([]string(nil), s.names...) }

// String lists the names in braces, as a Lua table would be written.
func (s *Shape) String() string { return "{" + strings.Join(s.names, ", ") + "}" }

// CheckNames reports names that are empty, repeated or not made of
// lower-case letters, digits and '_'.
func (s *Shape) CheckNames() error {
	seen := make(map[string]bool, len(s.names))
	for i, n := range s.names {
		if n == "" || strings.Trim(n, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
			return fmt.Errorf("reply element %d: name %q is not lower-case letters, digits and '_'", i+1, n)
		}
		if seen[n] {
			return fmt.Errorf("reply element %d: name %q is declared twice", i+1, n)
		}
		seen[n] = true
	}
	return nil
}

// Check reports whether r has the shape: an array of exactly Len elements.
func (s *Shape) Check(r Reply) error {
	if r.kind != ReplyArray {
		return fmt.Errorf("reply is %s, want an array %s", r.describe(), s)
	}
	if n := r.Len(); n != len(s.names) {
		return fmt.Errorf("reply has %d elements, want %d: %s", n, len(s.names), s)
	}
	return nil
}

func (s *Shape) index(name string) int {
	for i, n := range s.names {
		if n == name {
			return i
		}
	}
	return -1
}

// Int returns the element called name of r, which must have the shape, as
// an integer (or a string that parses as one).
func (s *Shape) Int(r Reply, name string) (int64, error) {
	i := s.index(name)
	if i < 0 {
		return 0, fmt.Errorf("reply %s has no element %q", s, name)
	}
	if err := s.Check(r); err != nil {
		return 0, err
	}
	n, err := r.Index(i).Int64()
	if err != nil {
		return 0, fmt.Errorf("reply element %q: %w", name, err)
	}
	return n, nil
}

// Decides reports whether the shape holds a decision: it names allowed,
// granted, limit, remaining, reset_us and retry_after_us (delay_us and
// window_us are optional).
func (s *Shape) Decides() bool { return s.decides }

// Decision decodes r, which must have the shape, as a decision: the
// elements named allowed (1 or 0), granted, limit, remaining, reset_us,
// retry_after_us and, where declared, delay_us and window_us (positive).
// Other elements are left to the plugin. window is Decision.Window unless
// the reply names one.
func (s *Shape) Decision(r Reply, window time.Duration) (Decision, error) {
	if !s.decides {
		return Decision{}, fmt.Errorf("reply %s is not a decision: it needs %s", s, strings.Join(decisionFields[:requiredFields], ", "))
	}
	if err := s.Check(r); err != nil {
		return Decision{}, err
	}
	var v [len(decisionFields)]int64 // on the stack: no allocation per decision
	for f, at := range s.at {
		if at < 0 {
			continue
		}
		if r.ints != nil { // inlined: a call costs in Wasm guests
			v[f] = r.ints[at]
			continue
		}
		var err error
		if v[f], err = r.arr[at].Int64(); err != nil {
			return Decision{}, fmt.Errorf("reply element %q: %w", decisionFields[f], err)
		}
	}
	if v[0] != 0 && v[0] != 1 {
		return Decision{}, fmt.Errorf("reply element %q is %d, want 1 or 0", FieldAllowed, v[0])
	}
	if s.at[7] >= 0 {
		if v[7] <= 0 {
			return Decision{}, fmt.Errorf("reply element %q is %d, want a positive number of microseconds", FieldWindow, v[7])
		}
		window = time.Duration(v[7]) * time.Microsecond
	}
	return Decision{
		Allowed:    v[0] == 1,
		Granted:    v[1],
		Limit:      v[2],
		Remaining:  v[3],
		Window:     window,
		Reset:      time.Duration(v[4]) * time.Microsecond,
		RetryAfter: time.Duration(v[5]) * time.Microsecond,
		Delay:      time.Duration(v[6]) * time.Microsecond,
	}, nil
}
