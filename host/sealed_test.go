package host_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// TestSealedStrings: a sealed string opens to its data under its own
// kind; under another kind, or changed in any part, it is ErrLeaseForged,
// and one whose parts are not base64url is ErrNotSealed.
func TestSealedStrings(t *testing.T) {
	e := newEngine(t, redistest.Start(t), perIP, 5*time.Second)
	ctx := context.Background()
	s := e.ClientLeases()
	sealed, err := host.Seal(ctx, s, "kind-a", []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if data, err := host.Unseal(ctx, s, "kind-a", sealed); err != nil || string(data) != `{"x":1}` {
		t.Fatalf("unseal: %q, %v", data, err)
	}
	body, mac, _ := strings.Cut(sealed, ".")
	for _, c := range []struct{ kind, str string }{
		{"kind-b", sealed},
		{"", sealed},
		{"kind-a", body},
		{"kind-a", "eyJ4IjoyfQ." + mac}, // {"x":2} under {"x":1}'s MAC
		{"kind-a", body + "." + mac[:len(mac)-2] + "AA"},
	} {
		if _, err := host.Unseal(ctx, s, c.kind, c.str); !errors.Is(err, host.ErrLeaseForged) {
			t.Errorf("unseal %q as %q: %v, want ErrLeaseForged", c.str, c.kind, err)
		}
	}
	if _, err := host.Unseal(ctx, s, "kind-a", "!!."+mac); !errors.Is(err, host.ErrNotSealed) {
		t.Errorf("a body that is not base64url: %v, want ErrNotSealed", err)
	}
}
