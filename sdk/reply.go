package sdk

import (
	"fmt"
	"strconv"
	"time"
)

// Reply is a script's reply as Redis returns it from Lua: nil, an integer,
// a string (status replies included), or an array of replies.
// Lua numbers become integers (truncated); Lua tables become arrays.
//
// Values are held unboxed, so that building and reading a reply of
// integers allocates nothing but the array (this matters most inside Wasm
// guests, where every allocation is expensive).
type Reply struct {
	kind ReplyKind
	n    int64
	s    string
	arr  []Reply
}

// ReplyKind is what a Reply holds.
type ReplyKind uint8

// The kinds of replies.
const (
	ReplyNil ReplyKind = iota
	ReplyInt
	ReplyString
	ReplyArray
)

// IntReply returns an integer reply.
func IntReply(n int64) Reply { return Reply{kind: ReplyInt, n: n} }

// StringReply returns a string reply.
func StringReply(s string) Reply { return Reply{kind: ReplyString, s: s} }

// ArrayReply returns an array reply of elems (not copied).
func ArrayReply(elems []Reply) Reply { return Reply{kind: ReplyArray, arr: elems} }

// NewReply converts a decoded Redis value (nil, int64, string, []any, or an
// already built Reply) into a Reply. Other types become their string form.
func NewReply(v any) Reply {
	switch t := v.(type) {
	case nil:
		return Reply{}
	case Reply:
		return t
	case int64:
		return IntReply(t)
	case int:
		return IntReply(int64(t))
	case string:
		return StringReply(t)
	case []byte:
		return StringReply(string(t))
	case []Reply:
		return ArrayReply(t)
	case []any:
		arr := make([]Reply, len(t))
		for i, e := range t {
			arr[i] = NewReply(e)
		}
		return ArrayReply(arr)
	case []int64:
		arr := make([]Reply, len(t))
		for i, e := range t {
			arr[i] = IntReply(e)
		}
		return ArrayReply(arr)
	default:
		return StringReply(fmt.Sprint(t))
	}
}

// IntsReply builds an array reply of integers.
func IntsReply(vs ...int64) Reply { return NewReply(vs) }

// Kind returns what the reply holds.
func (r Reply) Kind() ReplyKind { return r.kind }

// Value returns the underlying value: nil, int64, string or []Reply.
func (r Reply) Value() any {
	switch r.kind {
	case ReplyInt:
		return r.n
	case ReplyString:
		return r.s
	case ReplyArray:
		return r.arr
	default:
		return nil
	}
}

// IsNil reports whether the reply is nil.
func (r Reply) IsNil() bool { return r.kind == ReplyNil }

// Int64 returns an integer reply, or a string reply that parses as one.
func (r Reply) Int64() (int64, error) {
	if r.kind == ReplyInt { // inlined: a call costs in Wasm guests
		return r.n, nil
	}
	return r.parseInt64()
}

func (r Reply) parseInt64() (int64, error) {
	switch r.kind {
	case ReplyString:
		n, err := strconv.ParseInt(r.s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("sdk: reply %q is not an integer", r.s)
		}
		return n, nil
	default:
		return 0, fmt.Errorf("sdk: reply %v is not an integer", r.Value())
	}
}

// Str returns a string reply, or the decimal form of an integer reply.
func (r Reply) Str() (string, error) {
	switch r.kind {
	case ReplyString:
		return r.s, nil
	case ReplyInt:
		return strconv.FormatInt(r.n, 10), nil
	default:
		return "", fmt.Errorf("sdk: reply %v is not a string", r.Value())
	}
}

// Array returns the elements of an array reply.
func (r Reply) Array() ([]Reply, error) {
	if r.kind != ReplyArray {
		return nil, fmt.Errorf("sdk: reply %v is not an array", r.Value())
	}
	return r.arr, nil
}

// Ints returns an array reply whose elements are all integers, and checks
// that it has at least min elements.
func (r Reply) Ints(min int) ([]int64, error) {
	arr, err := r.Array()
	if err != nil {
		return nil, err
	}
	if len(arr) < min {
		return nil, fmt.Errorf("sdk: reply has %d elements, want at least %d", len(arr), min)
	}
	out := make([]int64, len(arr))
	for i, e := range arr {
		if out[i], err = e.Int64(); err != nil {
			return nil, fmt.Errorf("sdk: element %d: %w", i, err)
		}
	}
	return out, nil
}

// DecisionFromReply decodes the conventional decision reply that the
// built-in scripts return:
//
//	{allowed (0|1), granted, limit, remaining, reset_us, retry_after_us [, delay_us]}
//
// Times are integer microseconds. window is copied into Decision.Window.
func DecisionFromReply(r Reply, window time.Duration) (Decision, error) {
	arr, err := r.Array()
	if err == nil && len(arr) < 6 {
		err = fmt.Errorf("sdk: reply has %d elements, want at least 6", len(arr))
	}
	if err != nil {
		return Decision{}, fmt.Errorf("decision reply: %w", err)
	}
	var v [7]int64 // on the stack: no allocation per decision
	for i := range min(len(arr), len(v)) {
		if v[i], err = arr[i].Int64(); err != nil {
			return Decision{}, fmt.Errorf("decision reply: sdk: element %d: %w", i, err)
		}
	}
	d := Decision{
		Allowed:    v[0] == 1,
		Granted:    v[1],
		Limit:      v[2],
		Remaining:  v[3],
		Window:     window,
		Reset:      time.Duration(v[4]) * time.Microsecond,
		RetryAfter: time.Duration(v[5]) * time.Microsecond,
	}
	d.Delay = time.Duration(v[6]) * time.Microsecond // 0 when absent
	return d, nil
}
