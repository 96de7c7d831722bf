package capability_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

func isolation(t *testing.T, srv *redistest.Server) *capability.Isolation {
	return &capability.Isolation{ClientAs: func(user, pass string) (redis.UniversalClient, error) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: pass, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = c.Close() })
		return c, nil
	}}
}

func TestIsolatedPluginsStayInTheirNamespace(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	_ = srv.Client().Set(ctx, "ruled:victim:r:{s}:k", "precious", 0).Err()
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	p, err := c.Register("hostile", []sdk.Script{
		{Name: "own", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}},
		{Name: "other", Source: `return redis.call('INCR', 'ruled:victim:r:{s}:k')`, Commands: []string{"INCR"}},
		{Name: "flush", Source: `return redis.call('FLUSHALL')`, Commands: []string{"INCR"}},
		{Name: "scan", Source: `return redis.call('SCAN', 0)`, Commands: []string{"INCR"}},
		{Name: "undeclared", Source: `return redis.call('SET', KEYS[1], 1)`, Commands: []string{"INCR"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Isolated() {
		t.Fatal("plugin not isolated on a Redis where ruled may run ACL SETUSER")
	}
	h := p.Host("r", "s")
	if r, err := h.Eval(ctx, "own", []string{"n"}); err != nil {
		t.Fatalf("own key: %v", err)
	} else if n, _ := r.Int64(); n != 1 {
		t.Fatalf("own key: %v", r.Value())
	}
	for _, script := range []string{"other", "flush", "scan", "undeclared"} {
		_, err := h.Eval(ctx, script, []string{"n"})
		// Redis 7.0 says "The user executing the script can't ..."; 7.2
		// and later say NOPERM.
		if capability.ClassOf(err) != capability.ClassScript ||
			!(strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "user executing the script can't")) {
			t.Errorf("%s: %v, want an ACL script error", script, err)
		}
	}
	if v, _ := srv.Client().Get(ctx, "ruled:victim:r:{s}:k").Result(); v != "precious" {
		t.Fatalf("another plugin's key is now %q", v)
	}
}

func TestForbiddenCommandsCannotBeDeclared(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{})
	for _, cmd := range []string{"FLUSHALL", "scan", "KEYS", "CONFIG", "ACL", "SCRIPT", "EVAL", "client|kill", "not a command"} {
		if _, err := c.Register("p", []sdk.Script{{Name: "s", Source: "return 1", Commands: []string{cmd}}}); err == nil {
			t.Errorf("declaring %q accepted", cmd)
		}
	}
}

func TestWithoutACLRightsIsolationIsOffWithAWarning(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	// ruled connects as a user that may run scripts but not ACL SETUSER.
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-acl").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "limited", Password: "pw"})
	defer client.Close()
	var logged strings.Builder
	c := capability.New(client, capability.Options{Isolation: isolation(t, srv), Logger: newTextLogger(&logged)})
	p, err := c.Register("p", []sdk.Script{{Name: "s", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Isolated() {
		t.Fatal("isolated without ACL rights")
	}
	if !strings.Contains(logged.String(), "ACL SETUSER ruled-plugin-p reset on nopass ~ruled:p:* resetchannels -@all") {
		t.Fatalf("the operator is not told what to run:\n%s", logged.String())
	}
	if _, err := p.Host("r", "s").Eval(ctx, "s", []string{"n"}); err != nil {
		t.Fatalf("the plugin still works, unisolated: %v", err)
	}
}
