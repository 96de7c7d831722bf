package capability_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// A reply that is not the script's declared shape is refused before the
// plugin sees it, with an error naming the plugin, the script and the
// difference; it is a plugin bug, not an outage.
func TestRepliesMustHaveTheDeclaredShape(t *testing.T) {
	srv := redistest.Start(t)
	p, err := newCap(t, srv, capability.Options{}).Register("mine", []sdk.Script{
		{Name: "seven", Source: `return {1, 1, 10, 9, 1000, 0, 1}`, Returns: sdk.DecisionShape},
		{Name: "six", Source: `return {1, 1, 10, 9, 1000, 0}`, Returns: sdk.DecisionShape},
		{Name: "free", Source: `return {1, 2, 3}`},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Host("r", "s")
	_, err = h.Eval(context.Background(), "seven", nil)
	for _, want := range []string{"plugin mine", "script seven", "has 7 elements, want 6: {allowed, granted"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("error %v, want it to contain %q", err, want)
		}
	}
	if capability.ClassOf(err) != capability.ClassScript || capability.Unavailable(err) {
		t.Fatalf("class %q", capability.ClassOf(err))
	}
	if r, err := h.Eval(context.Background(), "six", nil); err != nil || r.Len() != 6 {
		t.Fatalf("declared reply: %v, %v", r.Value(), err)
	}
	if r, err := h.Eval(context.Background(), "free", nil); err != nil || r.Len() != 3 {
		t.Fatalf("undeclared reply: %v, %v", r.Value(), err)
	}
}

func TestBadReplyNamesAreRefusedAtRegister(t *testing.T) {
	srv := redistest.Start(t)
	_, err := newCap(t, srv, capability.Options{}).Register("mine", []sdk.Script{
		{Name: "x", Source: `return 1`, Returns: sdk.NewShape("a", "a")},
	})
	if err == nil || !strings.Contains(err.Error(), `"a" is declared twice`) {
		t.Fatalf("%v", err)
	}
}
