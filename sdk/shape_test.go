package sdk_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

func TestShapeReadsByName(t *testing.T) {
	// The decision fields in another order, a delay and a field of the
	// plugin's own.
	sh := sdk.NewShape("flag", sdk.FieldRetryAfter, sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit,
		sdk.FieldRemaining, sdk.FieldReset, sdk.FieldDelay)
	r := sdk.IntsReply(7, 0, 1, 2, 10, 8, 1500, 250)
	d, err := sh.Decision(r, time.Second)
	want := sdk.Decision{Allowed: true, Granted: 2, Limit: 10, Remaining: 8, Window: time.Second,
		Reset: 1500 * time.Microsecond, Delay: 250 * time.Microsecond}
	if err != nil || d != want {
		t.Fatalf("%+v, %v; want %+v", d, err, want)
	}
	if n, err := sh.Int(r, "flag"); err != nil || n != 7 {
		t.Fatalf("flag = %d, %v", n, err)
	}
	if _, err := sh.Int(r, "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown name: %v", err)
	}
	// Without delay_us declared, no element is read as a delay.
	d, err = sdk.NewShape(sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit, sdk.FieldRemaining, sdk.FieldReset,
		sdk.FieldRetryAfter, "flag").Decision(sdk.IntsReply(1, 1, 10, 9, 1500, 0, 1), time.Second)
	if err != nil || d.Delay != 0 {
		t.Fatalf("undeclared delay: %+v, %v", d, err)
	}
}

func TestShapeRejectsOtherReplies(t *testing.T) {
	sh := sdk.DecisionShape
	for _, tc := range []struct {
		reply sdk.Reply
		want  string
	}{
		{sdk.IntsReply(1, 1, 10, 9, 1500, 0, 1), "has 7 elements, want 6: {allowed, granted, limit, remaining, reset_us, retry_after_us}"},
		{sdk.IntsReply(1, 1), "has 2 elements, want 6"},
		{sdk.IntReply(3), "reply is the integer 3, want an array {allowed"},
		{sdk.Reply{}, "reply is nil"},
		{sdk.StringReply("OK"), `reply is "OK"`},
		{sdk.NewReply([]any{int64(1), "x", int64(1), int64(1), int64(1), int64(1)}), `element "granted"`},
		{sdk.IntsReply(3, 1, 10, 9, 1500, 0), `"allowed" is 3, want 1 or 0`},
	} {
		_, err := sh.Decision(tc.reply, time.Second)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Decision(%v) = %v, want an error containing %q", tc.reply.Value(), err, tc.want)
		}
	}
	if _, err := sdk.NewShape("a", "b").Decision(sdk.IntsReply(1, 2), time.Second); err == nil ||
		!strings.Contains(err.Error(), "is not a decision") {
		t.Fatalf("a shape without decision fields decoded a decision: %v", err)
	}
}

func TestShapeCheckNames(t *testing.T) {
	for _, names := range [][]string{{"a", "a"}, {""}, {"Allowed"}, {"a-b"}} {
		if err := sdk.NewShape(names...).CheckNames(); err == nil {
			t.Errorf("names %q accepted", names)
		}
	}
	if err := sdk.NewShape("allowed", "rate_2").CheckNames(); err != nil {
		t.Fatal(err)
	}
	if !sdk.DecisionShape.Decides() || sdk.NewShape("allowed").Decides() {
		t.Fatal("Decides is wrong")
	}
}

// Reading a decision by name allocates nothing, as positional reading did.
func TestShapeDecisionDoesNotAllocate(t *testing.T) {
	r := sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3_600_000_000, 0)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := sdk.DecisionShape.Decision(r, time.Hour); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func TestAReplyMayNameItsWindow(t *testing.T) {
	sh := sdk.NewShape(sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit, sdk.FieldRemaining, sdk.FieldReset,
		sdk.FieldRetryAfter, sdk.FieldWindow)
	if !sh.Decides() {
		t.Fatal("a decision with a window does not decide")
	}
	d, err := sh.Decision(sdk.IntsReply(1, 1, 10, 9, 1500, 0, 60e6), time.Second)
	if err != nil || d.Window != time.Minute {
		t.Fatalf("window_us 60e6: %+v, %v; want the window a minute, not the second passed", d, err)
	}
	if _, err := sh.Decision(sdk.IntsReply(1, 1, 10, 9, 1500, 0, 0), time.Second); err == nil || !strings.Contains(err.Error(), sdk.FieldWindow) {
		t.Fatalf("window_us 0: %v, want an error naming it", err)
	}
	if sdk.NewShape(sdk.FieldAllowed, sdk.FieldWindow).Decides() {
		t.Fatal("a window alone decides")
	}
}
