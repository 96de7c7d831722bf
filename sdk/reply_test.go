package sdk_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

func TestNewReplyKindsAndValues(t *testing.T) {
	for _, c := range []struct {
		in   any
		kind sdk.ReplyKind
		want any
	}{
		{nil, sdk.ReplyNil, nil},
		{int64(-7), sdk.ReplyInt, int64(-7)},
		{3, sdk.ReplyInt, int64(3)},
		{"ok", sdk.ReplyString, "ok"},
		{[]byte("b"), sdk.ReplyString, "b"},
		{1.5, sdk.ReplyString, "1.5"},
		{[]any{int64(1), "x", nil}, sdk.ReplyArray, []sdk.Reply{sdk.IntReply(1), sdk.StringReply("x"), {}}},
		{[]int64{4, 5}, sdk.ReplyArray, []sdk.Reply{sdk.IntReply(4), sdk.IntReply(5)}},
	} {
		r := sdk.NewReply(c.in)
		if r.Kind() != c.kind || !reflect.DeepEqual(r.Value(), c.want) || r.IsNil() != (c.kind == sdk.ReplyNil) {
			t.Errorf("NewReply(%#v): kind %d value %#v, want %d %#v", c.in, r.Kind(), r.Value(), c.kind, c.want)
		}
		if again := sdk.NewReply(r); !reflect.DeepEqual(again, r) {
			t.Errorf("NewReply of a Reply changed it: %#v -> %#v", r, again)
		}
	}
}

func TestReplyConversions(t *testing.T) {
	if n, err := sdk.StringReply("42").Int64(); n != 42 || err != nil {
		t.Errorf("Int64 of \"42\": %d, %v", n, err)
	}
	if _, err := sdk.StringReply("x").Int64(); err == nil {
		t.Error("Int64 of \"x\" did not fail")
	}
	if s, err := sdk.IntReply(-3).Str(); s != "-3" || err != nil {
		t.Errorf("Str of -3: %q, %v", s, err)
	}
	if _, err := sdk.IntReply(1).Array(); err == nil {
		t.Error("Array of an integer did not fail")
	}
	if _, err := (sdk.Reply{}).Str(); err == nil {
		t.Error("Str of nil did not fail")
	}
	if _, err := sdk.NewReply([]any{int64(1), "x"}).Ints(1); err == nil {
		t.Error("Ints of a reply holding a non-integer did not fail")
	}
}

func TestDecisionFromReply(t *testing.T) {
	d, err := sdk.DecisionFromReply(sdk.IntsReply(0, 0, 10, 0, 1500, 900), time.Second)
	want := sdk.Decision{Limit: 10, Window: time.Second, Reset: 1500 * time.Microsecond, RetryAfter: 900 * time.Microsecond}
	if err != nil || d != want {
		t.Fatalf("%+v, %v; want %+v", d, err, want)
	}
	// A seventh element is not read as anything: before shapes, an
	// appended flag became a delay the middleware slept on.
	for _, bad := range []sdk.Reply{sdk.IntsReply(1, 2, 10, 8, 1500, 0, 1), sdk.IntsReply(1, 2, 3), sdk.IntReply(1),
		sdk.IntsReply(2, 0, 10, 0, 1500, 900),
		sdk.NewReply([]any{int64(1), "x", int64(1), int64(1), int64(1), int64(1)})} {
		if _, err := sdk.DecisionFromReply(bad, time.Second); err == nil {
			t.Errorf("DecisionFromReply(%v) did not fail", bad.Value())
		}
	}
}

// Integers are held unboxed: reading a decision reply allocates nothing.
func TestReadingADecisionDoesNotAllocate(t *testing.T) {
	r := sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3_600_000_000, 0)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := sdk.DecisionFromReply(r, time.Hour); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// An array of integers may be held as []int64 (IntsReply, and what the
// decoders build) or as []Reply (ArrayReply): both read and compare alike.
func TestIntegerArraysReadAlikeEitherWay(t *testing.T) {
	ints := sdk.IntsReply(7, -1, 1<<40)
	elems := sdk.ArrayReply([]sdk.Reply{sdk.IntReply(7), sdk.IntReply(-1), sdk.IntReply(1 << 40)})
	for _, r := range []sdk.Reply{ints, elems, sdk.NewReply([]any{int64(7), int64(-1), int64(1 << 40)})} {
		if r.Kind() != sdk.ReplyArray || r.Len() != 3 || !r.Equal(ints) || !ints.Equal(r) || !r.Equal(elems) {
			t.Fatalf("%#v: kind %d, len %d, not equal to the other forms", r, r.Kind(), r.Len())
		}
		if n, err := r.Index(2).Int64(); err != nil || n != 1<<40 {
			t.Errorf("Index(2) = %d, %v", n, err)
		}
		arr, err := r.Array()
		if err != nil || !reflect.DeepEqual(arr, []sdk.Reply{sdk.IntReply(7), sdk.IntReply(-1), sdk.IntReply(1 << 40)}) {
			t.Errorf("Array() = %#v, %v", arr, err)
		}
		got, err := r.Ints(3)
		if err != nil || !reflect.DeepEqual(got, []int64{7, -1, 1 << 40}) {
			t.Errorf("Ints(3) = %v, %v", got, err)
		}
		got[0] = 99 // the caller's copy
		if n, _ := r.Index(0).Int64(); n != 7 {
			t.Errorf("changing Ints' result changed the reply: %d", n)
		}
		if _, err := r.Ints(4); err == nil {
			t.Error("Ints(4) of three elements did not fail")
		}
	}
	for _, c := range []struct{ a, b sdk.Reply }{
		{ints, sdk.IntsReply(7, -1)},
		{ints, sdk.IntsReply(7, -1, 0)},
		{elems, sdk.ArrayReply([]sdk.Reply{sdk.IntReply(7), sdk.StringReply("-1"), sdk.IntReply(1 << 40)})},
		{sdk.IntReply(1), sdk.StringReply("1")},
		{sdk.Reply{}, sdk.IntReply(0)},
		{sdk.IntsReply(), sdk.Reply{}},
	} {
		if c.a.Equal(c.b) || c.b.Equal(c.a) {
			t.Errorf("%#v and %#v compare equal", c.a.Value(), c.b.Value())
		}
	}
	if e := sdk.IntsReply(); e.Kind() != sdk.ReplyArray || e.Len() != 0 || !e.Equal(sdk.ArrayReply(nil)) {
		t.Errorf("an empty IntsReply is %#v", e)
	}
	if n := sdk.IntReply(3).Len(); n != 0 {
		t.Errorf("Len of an integer = %d", n)
	}
}
