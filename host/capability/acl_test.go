package capability_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
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

func TestWithoutACLRightsPluginsFailClosedUntilTheOperatorActs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	// ruled connects as a user that may run scripts but not ACL SETUSER.
	if err := srv.Client().Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "+@all", "-acl").Err(); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "limited", Password: "pw"})
	defer client.Close()
	var logged logBuf
	c := capability.New(client, capability.Options{Isolation: isolation(t, srv), Logger: logged.logger()})
	p, err := c.Register("p", []sdk.Script{{Name: "s", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Isolated() || c.IsolationErr() == nil {
		t.Fatal("isolation reported in place without ACL rights")
	}
	line := "ACL SETUSER ruled-plugin-p reset on nopass ~ruled:p:* resetchannels -@all"
	if !strings.Contains(logged.String(), line) {
		t.Fatalf("the operator is not told what to run:\n%s", logged.String())
	}
	h := p.Host("r", "s")
	if _, err := h.Eval(ctx, "s", []string{"n"}); capability.ClassOf(err) != capability.ClassIsolation {
		t.Fatalf("call without the plugin's user: %v, want class isolation", err)
	}
	if n, _ := srv.Client().Exists(ctx, "ruled:p:r:{s}:n").Result(); n != 0 {
		t.Fatal("the script ran without its ACL user")
	}
	// The operator runs the logged line (without the modifiers this Redis
	// does not know, which the log leaves out too).
	logs := logged.String()
	start := strings.Index(logs, line)
	end := strings.IndexAny(logs[start:], "\"]\n")
	args := []any{}
	for _, a := range strings.Fields(logs[start : start+end]) {
		args = append(args, a)
	}
	if err := srv.Client().Do(ctx, args...).Err(); err != nil {
		t.Fatalf("the logged line %q: %v", logs[start:start+end], err)
	}
	if r, err := h.Eval(ctx, "s", []string{"n"}); err != nil {
		t.Fatalf("after the operator set the user up: %v", err)
	} else if n, _ := r.Int64(); n != 1 {
		t.Fatalf("INCR answered %v", r.Value())
	}
}

// userExists reports whether srv knows the ACL user.
func userExists(t *testing.T, srv *redistest.Server, user string) bool {
	t.Helper()
	users, err := srv.Client().Do(context.Background(), "ACL", "USERS").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	return slices.Contains(users, user)
}

// waitUntil polls cond until it holds, failing the test after within.
func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
}

// inBackground runs loop (Reconcile, Probe) until the test ends.
func inBackground(t *testing.T, loop func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); loop(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestIsolationFollowsARestartedRedis: a restarted Redis has forgotten the
// plugin users; the first call after it answers again sets them up and
// succeeds, as the plugin's own user (another namespace stays out of reach).
func TestIsolationFollowsARestartedRedis(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	p, err := c.Register("p", []sdk.Script{
		{Name: "incr", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}},
		{Name: "other", Source: `return redis.call('INCR', 'ruled:q:r:{s}:k')`, Commands: []string{"INCR"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Host("r", "s")
	if _, err := h.Eval(ctx, "incr", []string{"n"}); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if userExists(t, srv, capability.ACLUser("p")) {
		t.Fatal("the restarted Redis still has the plugin user: the test proves nothing")
	}
	// The pooled connections died with the server: go-redis may spend a
	// call or two finding that out (class connection), never more.
	var r sdk.Reply
	for i := 0; ; i++ {
		if r, err = h.Eval(ctx, "incr", []string{"n"}); err == nil {
			break
		}
		if capability.ClassOf(err) != capability.ClassConnection || i == 2 {
			t.Fatalf("call %d after the restart: %v", i, err)
		}
	}
	if n, _ := r.Int64(); n != 1 {
		t.Fatalf("INCR on the empty Redis answered %v", r.Value())
	}
	if !userExists(t, srv, capability.ACLUser("p")) || !p.Isolated() {
		t.Fatal("the plugin user was not set up again")
	}
	if _, err := h.Eval(ctx, "other", []string{"n"}); capability.ClassOf(err) != capability.ClassScript {
		t.Fatalf("another namespace after the repair: %v, want an ACL script error", err)
	}
}

// TestRedisDownAtRegisterFailsClosed: a plugin registered while Redis is
// down never runs without its user; once Redis is up, calls work, isolated.
func TestRedisDownAtRegisterFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	ctx := context.Background()
	var logged logBuf
	c := newCap(t, srv, capability.Options{Timeout: 200 * time.Millisecond, Isolation: isolation(t, srv), Logger: logged.logger()})
	p, err := c.Register("p", []sdk.Script{{Name: "incr", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Isolated() || c.IsolationErr() == nil {
		t.Fatal("isolation reported in place while Redis is down")
	}
	if !strings.Contains(logged.String(), "plugin isolation not in place") {
		t.Fatalf("no warning:\n%s", logged.String())
	}
	srv.Restart()
	h := p.Host("r", "s")
	var r sdk.Reply
	waitUntil(t, 3*time.Second, "a call that succeeds once Redis is up", func() bool {
		r, err = h.Eval(ctx, "incr", []string{"n"})
		if c := capability.ClassOf(err); c == capability.ClassScript || c == capability.ClassRefused {
			t.Fatalf("call once Redis is up: %v", err)
		}
		return err == nil
	})
	if n, _ := r.Int64(); n != 1 || !p.Isolated() || !userExists(t, srv, capability.ACLUser("p")) {
		t.Fatalf("INCR %v, isolated %v", r.Value(), p.Isolated())
	}
}

// TestReconcileRestoresUsersNoCallVisits: with no calls at all, Reconcile
// puts the users back on a Redis that lost them.
func TestReconcileRestoresUsersNoCallVisits(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	if _, err := c.Register("p", []sdk.Script{{Name: "s", Source: `return 1`}}); err != nil {
		t.Fatal(err)
	}
	inBackground(t, func(ctx context.Context) { c.Reconcile(ctx, 100*time.Millisecond) })
	srv.Restart()
	waitUntil(t, 2*time.Second, "Reconcile sets the user up again", func() bool { return userExists(t, srv, capability.ACLUser("p")) })
}

// TestPluginUsersMayNotSelect: SELECT would let a script write its
// namespace in another database.
func TestPluginUsersMayNotSelect(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	p, err := c.Register("p", []sdk.Script{{Name: "s", Source: `redis.call('SELECT', 1); return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Host("r", "s").Eval(ctx, "s", []string{"n"}); capability.ClassOf(err) != capability.ClassScript {
		t.Fatalf("SELECT in a script: %v, want an ACL script error", err)
	}
	if n, _ := srv.Client().Do(ctx, "DBSIZE").Int64(); n != 0 {
		t.Fatalf("database 0 holds %d keys", n)
	}
}

// TestARefusedScriptIsNeverRunTwice: a script that wrote and then hit an
// ACL refusal is a plugin bug, not a missing user: it is not retried.
func TestARefusedScriptIsNeverRunTwice(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	p, err := c.Register("p", []sdk.Script{{Name: "s", Source: `redis.call('INCR', KEYS[1]); return redis.call('SET', KEYS[1], 0)`, Commands: []string{"INCR"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Host("r", "s").Eval(ctx, "s", []string{"n"}); capability.ClassOf(err) != capability.ClassScript {
		t.Fatalf("undeclared SET: %v, want class script", err)
	}
	if n, _ := srv.Client().Get(ctx, "ruled:p:r:{s}:n").Int64(); n != 1 {
		t.Fatalf("the counter is %d: the script ran %d times", n, n)
	}
}

// TestProbeFollowsRedisAndRestoresUsersAfterARestart: the probe, not the
// calls, says whether Redis answers; a master with a new run_id gets the
// plugin users again before any call needs them.
func TestProbeFollowsRedisAndRestoresUsersAfterARestart(t *testing.T) {
	srv := redistest.Start(t)
	var mu sync.Mutex
	var changes []bool
	c := newCap(t, srv, capability.Options{Timeout: 100 * time.Millisecond, Isolation: isolation(t, srv),
		OnAvailability: func(up bool) { mu.Lock(); changes = append(changes, up); mu.Unlock() }})
	if c.RedisErr() == nil {
		t.Fatal("RedisErr is nil before any probe")
	}
	if _, err := c.Register("p", []sdk.Script{{Name: "s", Source: `return 1`}}); err != nil {
		t.Fatal(err)
	}
	inBackground(t, func(ctx context.Context) { c.Probe(ctx, 50*time.Millisecond) })
	waitUntil(t, 2*time.Second, "the first probe", func() bool { return c.RedisErr() == nil })
	srv.Pause()
	waitUntil(t, 2*time.Second, "a failed probe of the paused Redis", func() bool { return c.RedisErr() != nil })
	srv.Resume()
	waitUntil(t, 2*time.Second, "a probe that finds Redis again", func() bool { return c.RedisErr() == nil })
	mu.Lock()
	got := fmt.Sprint(changes)
	mu.Unlock()
	if got != "[true false true]" {
		t.Fatalf("OnAvailability calls %s, want [true false true]", got)
	}
	srv.Restart()
	waitUntil(t, 2*time.Second, "the plugin user on the restarted Redis, with no call", func() bool { return userExists(t, srv, capability.ACLUser("p")) })
}
