package capability_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

var echoKeys = sdk.Script{Name: "keys", Source: `return KEYS`, Commands: nil}
var nowScript = sdk.Script{Name: "now", Source: `return ruled_now_us()`, Commands: nil}
var argsScript = sdk.Script{Name: "args", Source: `return ARGV`, Commands: nil}

func newCap(t *testing.T, srv *redistest.Server, o capability.Options) *capability.Capability {
	t.Helper()
	// As host/store builds clients: the read and write time-outs match the
	// capability's, which is what bounds pipelined calls.
	rw := max(o.Timeout, capability.DefaultTimeout)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		ReadTimeout: rw, WriteTimeout: rw})
	t.Cleanup(func() { _ = c.Close() })
	return capability.New(c, o)
}

func TestKeysAreNamespacedWithOneHashTag(t *testing.T) {
	srv := redistest.Start(t)
	p, err := newCap(t, srv, capability.Options{}).Register("myplugin", []sdk.Script{echoKeys})
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Host("rule-1", "user:{42} *evil*").Eval(context.Background(), "keys", []string{"meta", "log"})
	if err != nil {
		t.Fatal(err)
	}
	arr, _ := r.Array()
	var keys []string
	for _, k := range arr {
		s, _ := k.Str()
		keys = append(keys, s)
	}
	want := []string{"ruled:myplugin:rule-1:{user:%7B42%7D%20%2Aevil%2A}:meta", "ruled:myplugin:rule-1:{user:%7B42%7D%20%2Aevil%2A}:log"}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

func TestEscapeSubjectIsInjectiveAndSafe(t *testing.T) {
	subjects := []string{"", "a", "A", "%41", "#x", "%23x", "a b", "a%20b", "{x}", "x}", "\x00", "\xff", "é",
		strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("é", 100), strings.Repeat("é", 101),
		"2001:db8::1", "203.0.113.7", "user@example.com", "*", "?", "[a]", "\\"}
	seen := map[string]string{}
	for _, s := range subjects {
		e := capability.EscapeSubject(s)
		if prev, dup := seen[e]; dup {
			t.Fatalf("%q and %q both escape to %q", prev, s, e)
		}
		seen[e] = s
		if strings.ContainsAny(e, "{}*?[]\\ \x00") || len(e) > 129 {
			t.Fatalf("%q escapes to unsafe %q", s, e)
		}
	}
	if capability.EscapeSubject("203.0.113.7") != "203.0.113.7" {
		t.Fatal("a plain IP should stay readable")
	}
}

func TestRefusals(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{})
	if _, err := c.Register("Bad Name", nil); err == nil {
		t.Fatal("bad plugin name accepted")
	}
	if _, err := c.Register("p", []sdk.Script{echoKeys, echoKeys}); err == nil {
		t.Fatal("duplicate script accepted")
	}
	p, _ := c.Register("p", []sdk.Script{echoKeys})
	h := p.Host("r", "s")
	for _, tc := range []struct {
		script string
		keys   []string
	}{
		{"undeclared", nil},
		{"keys", []string{"../other"}},
		{"keys", []string{"a:b"}},
		{"keys", []string{"{x}"}},
		{"keys", []string{""}},
	} {
		_, err := h.Eval(context.Background(), tc.script, tc.keys)
		if capability.ClassOf(err) != capability.ClassRefused {
			t.Errorf("%s %q: error %v, want class refused", tc.script, tc.keys, err)
		}
	}
}

func TestScriptsSurviveFlushAndRestart(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := newCap(t, srv, capability.Options{Timeout: time.Second}).Register("p", []sdk.Script{nowScript})
	h := p.Host("r", "s")
	eval := func() int64 {
		t.Helper()
		r, err := h.Eval(context.Background(), "now", nil)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := r.Int64()
		return n
	}
	first := eval()
	if d := time.Now().UnixMicro() - first; d < -time.Second.Microseconds() || d > time.Second.Microseconds() {
		t.Fatalf("ruled_now_us() = %d, far from the wall clock", first)
	}
	_ = srv.Client().ScriptFlush(context.Background()).Err()
	if eval() < first {
		t.Fatal("time went backwards")
	}
	srv.Restart()
	var err error
	for i := 0; i < 10; i++ {
		if _, err = h.Eval(context.Background(), "now", nil); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

func TestInjectedClockAndArgs(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := newCap(t, srv, capability.Options{Clock: func() int64 { return 1_790_000_000_123_457 }}).Register("p", []sdk.Script{nowScript, argsScript})
	h := p.Host("r", "s")
	r, _ := h.Eval(context.Background(), "now", nil)
	if n, _ := r.Int64(); n != 1_790_000_000_123_457 {
		t.Fatalf("injected clock: %d", n)
	}
	r, _ = h.Eval(context.Background(), "args", nil, 7, "x")
	if arr, _ := r.Array(); len(arr) != 2 {
		t.Fatalf("the clock argument leaked into ARGV: %v", r.Value())
	}
}

// Without a clock (production) a call carries the plugin's arguments only,
// and ruled_now_us() is Redis's TIME, for loaded and native plugins alike.
func TestRedisClockAndArgs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{})
	loaded, err := c.Register("loaded", []sdk.Script{nowScript, argsScript})
	if err != nil {
		t.Fatal(err)
	}
	native, err := c.RegisterNative("native", []sdk.Script{nowScript, argsScript})
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]*capability.Plugin{"loaded": loaded, "native": native} {
		h := p.Host("r", "s")
		before, err := srv.Client().Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		r, err := h.Eval(ctx, "now", nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		after, err := srv.Client().Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now, _ := r.Int64(); now < before.UnixMicro() || now > after.UnixMicro() {
			t.Fatalf("%s: ruled_now_us() = %d, want Redis's TIME, between %d and %d", name, now, before.UnixMicro(), after.UnixMicro())
		}
		r, err = h.Eval(ctx, "args", nil, 7, "x")
		if arr, _ := r.Array(); err != nil || len(arr) != 2 || arr[0].Value() != "7" || arr[1].Value() != "x" {
			t.Fatalf("%s: ARGV %v (%v), want the plugin's 7 and x only", name, r.Value(), err)
		}
		if err := p.Preload(ctx); err != nil {
			t.Fatal(err)
		}
		if cmd, err := p.Command("r", "s", "args", nil, 7, "x"); err != nil || len(cmd) != 5 {
			t.Fatalf("%s: command line %v (%v), want EVALSHA, the SHA, 0 keys and the two arguments", name, cmd, err)
		}
	}
}

func TestTimeoutAndBreaker(t *testing.T) {
	t.Run("direct", func(t *testing.T) { testTimeoutAndBreaker(t, nil) })
	t.Run("autopipelined", func(t *testing.T) { testTimeoutAndBreaker(t, redis.DefaultBlockingAutoPipelineOptions()) })
}

func testTimeoutAndBreaker(t *testing.T, pipe *redis.AutoPipelineOptions) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{Timeout: 100 * time.Millisecond, BreakerFailures: 2, BreakerCooldown: 100 * time.Millisecond,
		Pipeline: pipe})
	p, _ := c.Register("p", []sdk.Script{nowScript})
	h := p.Host("r", "s")
	if _, err := h.Eval(context.Background(), "now", nil); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	for range 3 { // time-outs of the callers' own deadlines say nothing of Redis
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		_, err := h.Eval(ctx, "now", nil)
		cancel()
		if capability.ClassOf(err) != capability.ClassTimeout {
			t.Fatalf("paused Redis, a caller's deadline of 30ms: %v, want a time-out", err)
		}
	}
	if !c.Available() {
		t.Fatal("the callers' deadlines opened the circuit")
	}
	for range 3 { // nor do callers who hang up while their call waits
		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(20*time.Millisecond, cancel)
		_, err := h.Eval(ctx, "now", nil)
		stop.Stop()
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("paused Redis, a caller who hung up: %v, want its cancellation named", err)
		}
	}
	if !c.Available() {
		t.Fatal("the callers' hang-ups opened the circuit")
	}
	for i := 0; i < 2; i++ {
		start := time.Now()
		_, err := h.Eval(context.Background(), "now", nil)
		if capability.ClassOf(err) != capability.ClassTimeout || time.Since(start) > 500*time.Millisecond {
			t.Fatalf("paused Redis: %v after %v, want a time-out after about 100ms", err, time.Since(start))
		}
	}
	if c.Available() {
		t.Fatal("breaker still closed after 2 time-outs")
	}
	start := time.Now()
	if _, err := h.Eval(context.Background(), "now", nil); !errors.Is(err, capability.ErrCircuitOpen) || time.Since(start) > 10*time.Millisecond {
		t.Fatalf("open circuit: %v after %v, want ErrCircuitOpen at once", err, time.Since(start))
	}
	srv.Resume()
	time.Sleep(120 * time.Millisecond)
	if _, err := h.Eval(context.Background(), "now", nil); err != nil {
		t.Fatalf("half-open probe: %v", err)
	}
	if !c.Available() {
		t.Fatal("breaker still open after a call succeeded")
	}
}

func TestScriptErrorsAreClassified(t *testing.T) {
	srv := redistest.Start(t)
	p, _ := newCap(t, srv, capability.Options{}).Register("p", []sdk.Script{{Name: "boom", Source: `return redis.call('NOSUCHCOMMAND')`}})
	_, err := p.Host("r", "s").Eval(context.Background(), "boom", nil)
	if capability.ClassOf(err) != capability.ClassScript || capability.Unavailable(err) {
		t.Fatalf("error %v, want class script", err)
	}
}

func TestPipelinedCallsKeepTheirOwnReplies(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{Timeout: 2 * time.Second, Pipeline: redis.DefaultBlockingAutoPipelineOptions()})
	p, _ := c.Register("p", []sdk.Script{{Name: "incr", Source: `return redis.call('INCR', KEYS[1])`}})
	const goroutines, each = 32, 50
	replies := make(chan int64, goroutines*each)
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		go func() {
			h := p.Host("r", "s")
			for i := 0; i < each; i++ {
				r, err := h.Eval(context.Background(), "incr", []string{"n"})
				if err != nil {
					errs <- err
					return
				}
				n, _ := r.Int64()
				replies <- n
			}
			errs <- nil
		}()
	}
	for g := 0; g < goroutines; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(replies)
	seen := map[int64]bool{}
	for n := range replies {
		if seen[n] || n < 1 || n > goroutines*each {
			t.Fatalf("reply %d duplicated or out of range", n)
		}
		seen[n] = true
	}
	if len(seen) != goroutines*each {
		t.Fatalf("%d distinct replies, want %d", len(seen), goroutines*each)
	}
	// NOSCRIPT recovery works through the pipeline too.
	_ = srv.Client().ScriptFlush(context.Background()).Err()
	if _, err := p.Host("r", "s").Eval(context.Background(), "incr", []string{"n"}); err != nil {
		t.Fatalf("after SCRIPT FLUSH: %v", err)
	}
}

// A reply over MaxReplyBytes is refused inside Redis, counts against the
// plugin (ClassRefused) and never opens the shared circuit.
func TestReplyCap(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{})
	p, err := c.Register("big", []sdk.Script{
		{Name: "str", Source: `return string.rep('x', tonumber(ARGV[1]))`},
		{Name: "arr", Source: `local t = {} for i = 1, tonumber(ARGV[1]) do t[i] = i end return t`},
		{Name: "nested", Source: `local t = {} for i = 1, tonumber(ARGV[1]) do t[i] = {string.rep('y', 100)} end return t`},
		{Name: "status", Source: `return redis.status_reply('FINE')`},
		{Name: "fails", Source: `return redis.error_reply('MINE plugin error')`},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Host("r", "s")
	ctx := context.Background()
	fits := []struct {
		script string
		n      int
	}{{"str", capability.MaxReplyBytes}, {"arr", capability.MaxReplyBytes/8 - 1}, {"nested", 100}}
	for _, f := range fits {
		if _, err := h.Eval(ctx, f.script, nil, f.n); err != nil {
			t.Fatalf("%s(%d) under the cap: %v", f.script, f.n, err)
		}
	}
	if r, err := h.Eval(ctx, "status", nil); err != nil || r.Value() != "FINE" {
		t.Fatalf("status reply: %v, %v", r.Value(), err)
	}
	if _, err := h.Eval(ctx, "fails", nil); err == nil || !strings.Contains(err.Error(), "MINE plugin error") || capability.ClassOf(err) != capability.ClassScript {
		t.Fatalf("plugin's own error reply: %v (class %q)", err, capability.ClassOf(err))
	}
	over := []struct {
		script string
		n      int
	}{{"str", capability.MaxReplyBytes + 1}, {"str", 1 << 20}, {"arr", 1 << 16}, {"nested", 1000}}
	for range 3 { // more than DefaultBreakerFailures
		for _, o := range over {
			_, err := h.Eval(ctx, o.script, nil, o.n)
			if capability.ClassOf(err) != capability.ClassRefused || !strings.Contains(err.Error(), "TOOLARGE") {
				t.Fatalf("%s(%d) over the cap: %v (class %q), want refused TOOLARGE", o.script, o.n, err, capability.ClassOf(err))
			}
		}
	}
	if !c.Available() {
		t.Fatal("oversized replies opened the shared circuit")
	}
	if _, err := h.Eval(ctx, "str", nil, 10); err != nil {
		t.Fatalf("a normal call after refused ones: %v", err)
	}
}

// A plugin compiled into ruled (RegisterNative) runs without the reply cap:
// its reply comes back whole, and its scripts name it and count their lines
// as a loaded plugin's do.
func TestNativeRepliesAreNotCapped(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{})
	p, err := c.RegisterNative("native", []sdk.Script{
		{Name: "str", Source: `return string.rep('x', tonumber(ARGV[1]))`},
		{Name: "broken", Source: "local x = 1\nreturn x + nil"},
	})
	if err != nil {
		t.Fatal(err)
	}
	h := p.Host("r", "s")
	ctx := context.Background()
	r, err := h.Eval(ctx, "str", nil, capability.MaxReplyBytes+1)
	if s, _ := r.Value().(string); err != nil || len(s) != capability.MaxReplyBytes+1 {
		t.Fatalf("native reply over the cap: %d bytes, %v; want all %d", len(s), err, capability.MaxReplyBytes+1)
	}
	if _, err := h.Eval(ctx, "broken", nil); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("native script's error: %v, want its own line 2", err)
	}
	if src := capability.NativeSource("native", "str", "return 1"); !strings.HasPrefix(src, "--ruled:native/str\n") ||
		strings.Contains(src, "TOOLARGE") {
		t.Fatalf("NativeSource: %q, want the naming line and no cap", src)
	}
}

// With HoldKeys the scripts' expiry commands do nothing: Redis keeps the
// keys a test clock still needs. The clock is read as before.
func TestHoldKeys(t *testing.T) {
	srv := redistest.Start(t)
	expire := sdk.Script{Name: "expire", Commands: []string{"SET", "PEXPIRE", "EXPIRE", "TTL"}, Source: `
redis.call('SET', KEYS[1], 'v')
redis.call('PEXPIRE', KEYS[1], 100000)
redis.pcall('expire', KEYS[1], 50)
return {redis.call('TTL', KEYS[1]), ruled_now_us()}`}
	for _, hold := range []bool{false, true} {
		c := newCap(t, srv, capability.Options{Clock: func() int64 { return 1_790_000_000_123_457 }, HoldKeys: hold})
		p, err := c.Register("p", []sdk.Script{expire})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Host("r", fmt.Sprint(hold)).Eval(context.Background(), "expire", []string{"k"})
		if err != nil {
			t.Fatal(err)
		}
		arr, _ := r.Array()
		var got []int64
		for _, v := range arr {
			n, _ := v.Int64()
			got = append(got, n)
		}
		want := "[50 1790000000123457]"
		if hold {
			want = "[-1 1790000000123457]" // no expiry
		}
		if fmt.Sprint(got) != want {
			t.Errorf("HoldKeys %v: TTL and clock %v, want %s", hold, got, want)
		}
	}
}

// ClearAll deletes every key under its capability's prefix, of every
// plugin and rule, and no other key.
func TestClearAll(t *testing.T) {
	srv := redistest.Start(t)
	set := sdk.Script{Name: "set", Commands: []string{"SET"}, Source: `return redis.call('SET', KEYS[1], 'v')`}
	write := func(c *capability.Capability, plugin string, n int) {
		p, err := c.Register(plugin, []sdk.Script{set})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := p.Host(fmt.Sprint("rule", i%3), fmt.Sprint("s", i)).Eval(context.Background(), "set", []string{"k"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mine := newCap(t, srv, capability.Options{Prefix: "ruled-test:run1"})
	other := newCap(t, srv, capability.Options{Prefix: "ruled-test:run10"})
	write(mine, "p", 250)
	write(mine, "q", 5)
	write(other, "p", 7)
	n, err := mine.ClearAll(context.Background())
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	left, _ := client.Keys(context.Background(), "*").Result()
	if err != nil || n != 255 || len(left) != 7 {
		t.Errorf("ClearAll deleted %d (%v), left %d keys; want 255 deleted and the other run's 7 left", n, err, len(left))
	}
}

// TestCommandIsTheCallsCommandLine: the command line Command returns,
// sent to Redis as it is, runs the script with the keys and arguments a
// call through Host gives it.
func TestCommandIsTheCallsCommandLine(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	p, err := newCap(t, srv, capability.Options{}).Register("myplugin", []sdk.Script{echoKeys, argsScript})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Preload(ctx); err != nil {
		t.Fatal(err)
	}
	client := srv.Client()
	h := p.Host("rule-1", "user:{42}")
	for _, tc := range []struct {
		script string
		keys   []string
		args   []any
	}{{"keys", []string{"c", "d"}, nil}, {"args", []string{"c"}, []any{1, "x"}}} {
		cmd, err := p.Command("rule-1", "user:{42}", tc.script, tc.keys, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := client.Do(ctx, cmd...).StringSlice()
		if err != nil {
			t.Fatalf("%s: %v", tc.script, err)
		}
		r, err := h.Eval(ctx, tc.script, tc.keys, tc.args...)
		if err != nil {
			t.Fatal(err)
		}
		arr, _ := r.Array()
		var viaHost []string
		for _, v := range arr {
			s, _ := v.Str()
			viaHost = append(viaHost, s)
		}
		if strings.Join(raw, " ") != strings.Join(viaHost, " ") {
			t.Errorf("%s: Command's line answers %q, a call through Host %q", tc.script, raw, viaHost)
		}
	}
	if _, err := p.Command("rule-1", "s", "undeclared", nil); capability.ClassOf(err) != capability.ClassRefused {
		t.Errorf("an undeclared script: %v", err)
	}
	if _, err := p.Command("rule-1", "s", "keys", []string{"no spaces"}); capability.ClassOf(err) != capability.ClassRefused {
		t.Errorf("a bad key: %v", err)
	}
}
