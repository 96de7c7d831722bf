package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

var (
	faultyOnce sync.Once
	faultyPath string
)

// faultyRules are faultRules plus rules on the faulty test plugin
// (testdata/faulty, built once as a Wasm module): /spin runs a script that
// loops, /writespin one that writes and then loops, /huge one that returns
// 1 MiB, /fine one that works. All follow the default on_error (allow).
func faultyRules(t *testing.T) string {
	t.Helper()
	faultyOnce.Do(func() {
		out := filepath.Join(filepath.Dir(buildRuled(t)), "faulty.wasm")
		buildPlugin(t, "./testdata/faulty", out)
		faultyPath = out
	})
	if faultyPath == "" {
		t.Fatal("the faulty test plugin did not build")
	}
	rule := func(name string) string {
		return fmt.Sprintf(`  - name: %[1]s
    when: request.path == "/%[1]s"
    subject: request.ip
    plugin: faulty
    config: {mode: %[2]s}
`, name, map[string]string{"spin": "spin", "writespin": "writespin", "huge": "huge", "fine": "ok"}[name])
	}
	return "plugins:\n  faulty: {wasm: " + faultyPath + "}\n" + faultRules() + rule("spin") + rule("writespin") + rule("huge") + rule("fine")
}

// TestFaultSpinningScript: a plugin's script loops in the managed Redis
// (default configuration). Redis answers BUSY after 100 ms; ruled's
// watchdog kills the script and quarantines the plugin. Every other rule
// follows on_error while Redis is busy and decides normally again within
// 2 s; the quarantined plugin's rule follows on_error at once, without
// running its script; ruled stays ready.
func TestFaultSpinningScript(t *testing.T) {
	d := spawnDaemon(t, faultyRules(t))
	d.waitReady(15 * time.Second)
	d.checkLimits("203.0.113.1")
	if v := d.check("/fine", "203.0.113.1"); v.status != 200 || v.degraded != "" {
		t.Fatalf("/fine before the fault: %+v", v) // the plugin is loaded and warm
	}
	spun := make(chan verdict, 1)
	started := time.Now()
	go func() {
		v, err := d.tryCheck("/spin", "203.0.113.1")
		if err != nil {
			v.errText = err.Error()
		}
		spun <- v
	}()
	time.Sleep(30 * time.Millisecond) // the script is running
	took := d.recoverAfter(started, 2*time.Second)
	t.Logf("other rules normal %v after the script began looping", took.Round(time.Millisecond))
	v := <-spun
	if v.status != 200 || v.degraded != "allow" || v.took > time.Second {
		t.Fatalf("/spin: %+v, want 200 degraded allow within 1s", v)
	}
	waitFor(t, time.Second, "the quarantine in the log", func() bool {
		return strings.Contains(d.log.String(), "plugin quarantined") && strings.Contains(d.log.String(), "plugin=faulty")
	})
	if !strings.Contains(d.log.String(), "watchdog: killed a script") {
		t.Fatalf("no kill in the log:\n%s", tail(d.log.String(), 30))
	}
	v = d.check("/spin", "203.0.113.2")
	if v.status != 200 || v.degraded != "allow" || !strings.Contains(v.errText, "quarantine") || v.took > 200*time.Millisecond {
		t.Fatalf("/spin while quarantined: %+v, want 200 degraded allow at once, class quarantine", v)
	}
	d.checkLimits("203.0.113.3")
	assertUsers(t, d.managedClient())
	d.waitReady(2 * time.Second)
}

// TestFaultUnkillableScriptManaged: a script that wrote before looping
// cannot be killed; ruled shuts its managed Redis down without saving, the
// supervisor starts it again (empty), and the other rules decide normally,
// isolated, within 3 s; the plugin is quarantined.
func TestFaultUnkillableScriptManaged(t *testing.T) {
	d := spawnDaemon(t, faultyRules(t))
	d.waitReady(15 * time.Second)
	if v := d.check("/fine", "203.0.113.1"); v.status != 200 || v.degraded != "" {
		t.Fatalf("/fine before the fault: %+v", v)
	}
	started := time.Now()
	go func() { _, _ = d.tryCheck("/writespin", "203.0.113.1") }()
	time.Sleep(30 * time.Millisecond)
	took := d.recoverAfter(started, 3*time.Second)
	t.Logf("other rules normal %v after the script began looping", took.Round(time.Millisecond))
	waitFor(t, time.Second, "the managed Redis shut down and restarted", func() bool {
		l := d.log.String()
		return strings.Contains(l, "cannot be killed: shutting it down without saving") && strings.Contains(l, "managed redis-server restarted")
	})
	if v := d.check("/writespin", "203.0.113.2"); v.degraded != "allow" || !strings.Contains(v.errText, "quarantine") {
		t.Fatalf("/writespin after the shutdown: %+v, want degraded allow, quarantined", v)
	}
	d.checkLimits("203.0.113.3")
	assertUsers(t, d.managedClient())
	d.waitReady(2 * time.Second)
	if n := strings.Count(d.log.String(), "managed redis-server restarted"); n != 1 {
		t.Fatalf("the managed Redis restarted %d times, want once:\n%s", n, tail(d.log.String(), 30))
	}
}

// TestFaultHugeReply: a script returning 1 MiB is refused inside Redis
// (the 64 KiB reply cap): its rule follows on_error, each call within its
// time-out, and the shared circuit stays closed, so the other rules,
// on_error deny included, decide normally right after.
func TestFaultHugeReply(t *testing.T) {
	d := spawnDaemon(t, faultyRules(t))
	d.waitReady(15 * time.Second)
	for i := range 6 { // twice the breaker's threshold
		v := d.check("/huge", fmt.Sprintf("203.0.113.%d", i))
		if v.status != 200 || v.degraded != "allow" || !strings.Contains(v.errText, "TOOLARGE") || v.took > time.Second {
			t.Fatalf("/huge: %+v, want 200 degraded allow (refused: TOOLARGE) within 1s", v)
		}
	}
	d.checkLimits("198.51.100.200")
	assertUsers(t, d.managedClient())
	d.waitReady(time.Second)
}

// TestFaultOOM: Redis at maxmemory refuses the scripts' writes. Decisions
// follow on_error (class oom) within their time-out, ruled stays ready
// (every instance shares the condition), and decisions are normal again
// within 2 s once memory is freed.
func TestFaultOOM(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory", "4mb", "--maxmemory-policy", "noeviction")
	d := startDaemon(t, "--redis", srv.URL())
	d.checkLimits("203.0.113.1")
	admin := srv.Client()
	ctx := context.Background()
	// Filled from inside Redis, so that what fills it is data, not a query
	// buffer that goes away: until a write of a new key is refused.
	fill := `for i = 1, 100 do redis.call('SET', 'filler:' .. ARGV[1] .. ':' .. i, string.rep('x', 1024)) end`
	for i := 0; admin.Set(ctx, "probe", 1, 0).Err() == nil; i++ {
		if i > 100 {
			t.Fatal("Redis still takes writes after 10 MB")
		}
		_ = admin.Eval(ctx, fill, nil, i).Err()
	}
	d.degradedNow("at maxmemory", "oom")
	d.waitReady(time.Second)
	freed := time.Now()
	if err := admin.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	took := d.recoverAfter(freed, 2*time.Second)
	t.Logf("normal decisions %v after memory was freed", took.Round(time.Millisecond))
	assertUsers(t, admin)
}

// TestFaultRedisLateAtStart: ruled starts before its Redis. It serves at
// once, not ready, every decision following on_error within its time-out;
// no plugin script runs without its ACL user. When Redis comes up,
// decisions are normal, isolated, within 3 s, with nobody acting.
func TestFaultRedisLateAtStart(t *testing.T) {
	srv := redistest.Start(t)
	srv.Kill()
	d := spawnDaemon(t, faultRules(), "--redis", srv.URL())
	d.readyIs(503, 3*time.Second)
	d.degradedNow("without Redis", "")
	srv.Restart()
	up := time.Now()
	took := d.recoverAfter(up, 3*time.Second)
	t.Logf("normal decisions %v after Redis came up", took.Round(time.Millisecond))
	assertUsers(t, srv.Client())
	d.readyIs(200, 3*time.Second)
}

// degradedNow asserts that decisions on fresh subjects follow on_error now,
// each within 1 s: /open degraded allow (its error naming class, if set),
// /closed 503 degraded deny.
func (d *daemon) degradedNow(when, class string) {
	d.t.Helper()
	for i := range 3 {
		ip := fmt.Sprintf("198.51.100.%d", i)
		open, closed := d.check("/open", ip), d.check("/closed", ip)
		if open.status != 200 || open.degraded != "allow" || !strings.Contains(open.errText, class) || open.took > time.Second {
			d.t.Fatalf("/open %s: %+v, want 200 degraded allow (class %q) within 1s", when, open, class)
		}
		if closed.status != 503 || closed.degraded != "deny" || closed.took > time.Second {
			d.t.Fatalf("/closed %s: %+v, want 503 degraded deny within 1s", when, closed)
		}
	}
}

// waitFor polls cond until it holds, failing the test after within, and
// returns how long that took.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(within); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
	}
	return time.Since(start)
}
