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
// Values are held unboxed, and an array of integers (what most scripts
// return) as one []int64, so that building and reading such a reply with
// Len and Index allocates nothing but that slice (this matters most inside
// Wasm guests, where every allocation is expensive). Compare replies with
// Equal: the same array may be held either way.
type Reply struct {
	kind ReplyKind
	n    int64
	s    string
	arr  []Reply
	ints []int64 // the elements of an array of integers, when arr is nil
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
// A []int64 or []Reply is held, not copied.
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
		if ints, ok := allInts(t); ok {
			return IntsReply(ints...)
		}
		arr := make([]Reply, len(t))
		for i, e := range t {
			arr[i] = NewReply(e)
		}
		return ArrayReply(arr)
	case []int64:
		return IntsReply(t...)
	default:
		return StringReply(fmt.Sprint(t))
	}
}

// allInts returns vs as integers if every element is an int64.
func allInts(vs []any) ([]int64, bool) {
	for _, v := range vs {
		if _, ok := v.(int64); !ok {
			return nil, false
		}
	}
	ints := make([]int64, len(vs))
	for i, v := range vs {
		ints[i] = v.(int64)
	}
	return ints, true
}

// IntsReply returns an array reply of integers, held as vs (not copied).
func IntsReply(vs ...int64) Reply {
	if vs == nil {
		vs = []int64{} // an empty array, not nil
	}
	return Reply{kind: ReplyArray, ints: vs}
}

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
		arr, _ := r.Array()
		return arr
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

// Array returns the elements of an array reply. For an array of integers
// it builds the slice; Len and Index read any array without allocating.
func (r Reply) Array() ([]Reply, error) {
	if r.kind != ReplyArray {
		return nil, fmt.Errorf("sdk: reply %v is not an array", r.Value())
	}
	if r.ints == nil {
		return r.arr, nil
	}
	arr := make([]Reply, len(r.ints))
	for i, n := range r.ints {
		arr[i] = IntReply(n)
	}
	return arr, nil
}

// Len returns the number of elements of an array reply, 0 for any other.
func (r Reply) Len() int {
	if r.ints != nil {
		return len(r.ints)
	}
	return len(r.arr)
}

// Index returns element i of an array reply. Like indexing a slice, it
// panics when i is out of range (or r is not an array).
func (r Reply) Index(i int) Reply {
	if r.ints != nil {
		return IntReply(r.ints[i])
	}
	return r.arr[i]
}

// Equal reports whether r and o hold the same value: the same kind and the
// same integer, string or elements.
func (r Reply) Equal(o Reply) bool {
	if r.kind != o.kind {
		return false
	}
	switch r.kind {
	case ReplyInt:
		return r.n == o.n
	case ReplyString:
		return r.s == o.s
	case ReplyArray:
		if r.Len() != o.Len() {
			return false
		}
		for i := range r.Len() {
			if !r.Index(i).Equal(o.Index(i)) {
				return false
			}
		}
	}
	return true
}

// Ints returns an array reply whose elements are all integers (or strings
// that parse as integers), and checks that it has at least min elements.
// The slice is the caller's.
func (r Reply) Ints(min int) ([]int64, error) {
	if r.kind != ReplyArray {
		return nil, fmt.Errorf("sdk: reply %v is not an array", r.Value())
	}
	if n := r.Len(); n < min {
		return nil, fmt.Errorf("sdk: reply has %d elements, want at least %d", n, min)
	}
	if r.ints != nil {
		return append([]int64(nil), r.ints...), nil
	}
	out := make([]int64, len(r.arr))
	for i, e := range r.arr {
		var err error
		if out[i], err = e.Int64(); err != nil {
			return nil, fmt.Errorf("sdk: element %d: %w", i, err)
		}
	}
	return out, nil
}

// DecisionFromReply decodes the reply of a script that declares
// DecisionShape:
//
//	{allowed (1|0), granted, limit, remaining, reset_us, retry_after_us}
//
// exactly; any other reply is an error. Times are integer microseconds.
// window is copied into Decision.Window. A script whose reply holds more
// (a delay, the plugin's own fields) declares its own Shape and decodes
// with Shape.Decision.
func DecisionFromReply(r Reply, window time.Duration) (Decision, error) {
	d, err := DecisionShape.Decision(r, window)
	if err != nil {
		return Decision{}, fmt.Errorf("decision reply: %w", err)
	}
	return d, nil
}

// describe names what the reply holds, for errors.
func (r Reply) describe() string {
	switch r.kind {
	case ReplyNil:
		return "nil"
	case ReplyInt:
		return "the integer " + strconv.FormatInt(r.n, 10)
	case ReplyString:
		if len(r.s) > 40 {
			return strconv.Quote(r.s[:40]) + "…"
		}
		return strconv.Quote(r.s)
	default:
		return fmt.Sprintf("an array of %d elements", r.Len())
	}
}
