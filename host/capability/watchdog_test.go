package capability_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// logBuf collects log lines for assertions; safe for concurrent use.
type logBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuf) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// busyRedis starts Redis as ruled starts its managed one: a script past
// 100 ms makes it answer BUSY.
func busyRedis(t *testing.T) *redistest.Server { return redistest.Start(t, "--lua-time-limit", "100") }

var (
	spin       = sdk.Script{Name: "spin", Source: `while true do end`}
	writeSpin  = sdk.Script{Name: "write-spin", Source: `redis.call('SET', KEYS[1], 1) while true do end`, Commands: []string{"set"}}
	goodScript = sdk.Script{Name: "good", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"incr"}}
)

// register registers one plugin or fails the test.
func register(t *testing.T, c *capability.Capability, name string, scripts ...sdk.Script) *capability.Plugin {
	t.Helper()
	p, err := c.Register(name, scripts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWatchdogKillsASpinningScriptAndQuarantinesItsPlugin: a script that
// loops keeps Redis BUSY; the first call answered BUSY wakes the watchdog,
// which kills the script, quarantines its plugin (calls refused at once,
// class quarantine), and every other plugin decides normally again. After
// the back-off the plugin is tried again; a second offence doubles it.
func TestWatchdogKillsASpinningScriptAndQuarantinesItsPlugin(t *testing.T) {
	srv := busyRedis(t)
	var logs logBuf
	const first = 400 * time.Millisecond
	c := newCap(t, srv, capability.Options{Isolation: isolation(t, srv), Quarantine: first, Logger: logs.logger()})
	bad := register(t, c, "spinner", spin)
	good := register(t, c, "good", goodScript)
	inBackground(t, func(ctx context.Context) { c.Probe(ctx, time.Minute) }) // only calls wake it
	ctx := context.Background()
	if _, err := good.Host("r", "s").Eval(ctx, "good", []string{"n"}); err != nil {
		t.Fatal(err)
	}

	offend := func() (normalAgain time.Duration) {
		t.Helper()
		started := time.Now()
		spun := make(chan error, 1)
		go func() { _, err := bad.Host("r", "s").Eval(ctx, "spin", nil); spun <- err }()
		time.Sleep(20 * time.Millisecond) // the script runs
		sawBusy := false
		waitUntil(t, 2*time.Second, "another plugin's calls succeed again", func() bool {
			_, err := good.Host("r", "s").Eval(ctx, "good", []string{"n"})
			sawBusy = sawBusy || capability.ClassOf(err) == capability.ClassBusy
			return err == nil
		})
		normalAgain = time.Since(started)
		err := <-spun
		if err == nil {
			t.Fatal("the spinning call succeeded")
		}
		if !sawBusy {
			t.Fatal("no call was answered BUSY: the script did not keep Redis busy")
		}
		// Killed first, named from SLOWLOG just after.
		waitUntil(t, time.Second, "the plugin quarantined", func() bool { return bad.Quarantined() != "" })
		return normalAgain
	}

	took := offend()
	if why := bad.Quarantined(); !strings.Contains(why, "spin") {
		t.Fatalf("after its script kept Redis busy: Quarantined() = %q", why)
	}
	if good.Quarantined() != "" {
		t.Fatal("the innocent plugin was quarantined")
	}
	begin := time.Now()
	_, err := bad.Host("r", "s").Eval(ctx, "spin", nil)
	if capability.ClassOf(err) != capability.ClassQuarantine || time.Since(begin) > 50*time.Millisecond {
		t.Fatalf("quarantined call: %v (class %q) after %v, want class quarantine at once", err, capability.ClassOf(err), time.Since(begin))
	}
	if !strings.Contains(logs.String(), "strikes=1") || !strings.Contains(logs.String(), "for="+first.String()) {
		t.Fatalf("no quarantine log line with strikes=1 for=%v:\n%s", first, logs.String())
	}
	t.Logf("spinning script stopped, other plugin normal again %v after it started", took)
	if again := register(t, c, "spinner", spin); again.Quarantined() == "" {
		t.Fatal("registering the plugin again (a reload) lifted its quarantine")
	}

	waitUntil(t, 2*first, "the back-off ends", func() bool { return bad.Quarantined() == "" })
	offend() // tried again, offends again
	if bad.Quarantined() == "" || !strings.Contains(logs.String(), "strikes=2") || !strings.Contains(logs.String(), "for="+(2*first).String()) {
		t.Fatalf("second offence: quarantined %q, log:\n%s", bad.Quarantined(), logs.String())
	}
}

// TestWatchdogNamesTheCulpritOfAnotherInstance: the script loops for ruled
// instance A, whose watchdog is not running; instance B's calls are
// answered BUSY, B kills the script and names A's plugin from SLOWLOG, so
// B does not run it either until the back-off ends.
func TestWatchdogNamesTheCulpritOfAnotherInstance(t *testing.T) {
	srv := busyRedis(t)
	a := newCap(t, srv, capability.Options{Isolation: isolation(t, srv)})
	b := newCap(t, srv, capability.Options{Isolation: isolation(t, srv), Logger: slog.New(slog.DiscardHandler)})
	badA := register(t, a, "spinner", spin)
	badB := register(t, b, "spinner", spin)
	goodB := register(t, b, "good", goodScript)
	inBackground(t, func(ctx context.Context) { b.Probe(ctx, time.Minute) })
	ctx := context.Background()
	spun := make(chan error, 1)
	go func() { _, err := badA.Host("r", "s").Eval(ctx, "spin", nil); spun <- err }()
	time.Sleep(20 * time.Millisecond)
	waitUntil(t, 2*time.Second, "B's calls succeed again", func() bool {
		_, err := goodB.Host("r", "s").Eval(ctx, "good", []string{"n"})
		return err == nil
	})
	if err := <-spun; err == nil {
		t.Fatal("the spinning call succeeded")
	}
	waitUntil(t, time.Second, "B quarantines the plugin whose script A ran", func() bool { return badB.Quarantined() != "" })
	if goodB.Quarantined() != "" || badA.Quarantined() != "" {
		t.Fatal("wrong quarantine: an innocent plugin, or A which never saw BUSY")
	}
}

// TestWatchdogUnkillableScript: a script that wrote and then loops cannot
// be killed. On an operator's Redis the watchdog quarantines the plugin and
// says what to do; Redis stays BUSY (not ready). On ruled's managed Redis
// (RestartUnkillable), it shuts Redis down without saving, for the
// supervisor to start again.
func TestWatchdogUnkillableScript(t *testing.T) {
	for _, managed := range []bool{false, true} {
		t.Run(map[bool]string{false: "external", true: "managed"}[managed], func(t *testing.T) {
			srv := busyRedis(t)
			var logs logBuf
			c := newCap(t, srv, capability.Options{Isolation: isolation(t, srv), Logger: logs.logger(), RestartUnkillable: managed})
			bad := register(t, c, "writer", writeSpin)
			good := register(t, c, "good", goodScript)
			inBackground(t, func(ctx context.Context) { c.Probe(ctx, 100*time.Millisecond) })
			waitUntil(t, 2*time.Second, "the first probe", func() bool { return c.RedisErr() == nil })
			ctx := context.Background()
			go func() { _, _ = bad.Host("r", "s").Eval(ctx, "write-spin", []string{"k"}) }()
			waitUntil(t, 2*time.Second, "the plugin quarantined", func() bool { return bad.Quarantined() != "" })
			if good.Quarantined() != "" {
				t.Fatal("the innocent plugin was quarantined")
			}
			if !managed {
				if !strings.Contains(logs.String(), "SHUTDOWN NOSAVE") {
					t.Fatalf("no log line tells the operator what to do:\n%s", logs.String())
				}
				waitUntil(t, 2*time.Second, "not ready while Redis is busy", func() bool {
					return capability.ClassOf(c.RedisErr()) == capability.ClassBusy
				})
				time.Sleep(500 * time.Millisecond) // five more probes find it BUSY and UNKILLABLE
				if n := strings.Count(logs.String(), "plugin quarantined"); n != 1 {
					t.Fatalf("one offence quarantined the plugin %d times:\n%s", n, logs.String())
				}
				srv.Kill() // end the test's script the only way there is
				return
			}
			waitUntil(t, 2*time.Second, "the managed Redis shut down", func() bool {
				return srv.Client().Ping(ctx).Err() != nil && capability.ClassOf(c.RedisErr()) == capability.ClassConnection
			})
		})
	}
}

// TestWatchdogNamesAScriptThatOutlivesItsCaller: the caller of a script
// that wrote and loops stops waiting before Redis answers anyone BUSY (its
// time-out came first, as on a loaded machine). The script runs on, and
// the watchdog still quarantines its plugin, and only that one.
func TestWatchdogNamesAScriptThatOutlivesItsCaller(t *testing.T) {
	srv := busyRedis(t)
	var logs logBuf
	c := newCap(t, srv, capability.Options{Isolation: isolation(t, srv), Logger: logs.logger()})
	bad := register(t, c, "writer", writeSpin)
	good := register(t, c, "good", goodScript)
	inBackground(t, func(ctx context.Context) { c.Probe(ctx, 100*time.Millisecond) })
	waitUntil(t, 2*time.Second, "the first probe", func() bool { return c.RedisErr() == nil })
	if _, err := good.Host("r", "s").Eval(context.Background(), "good", []string{"n"}); err != nil {
		t.Fatal(err)
	}
	// 20 ms: well before the 100 ms after which Redis answers BUSY.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := bad.Host("r", "s").Eval(ctx, "write-spin", []string{"k"}); capability.ClassOf(err) != capability.ClassTimeout {
		t.Fatalf("the looping call: %v, want class timeout", err)
	}
	waitUntil(t, 2*time.Second, "the plugin quarantined", func() bool { return bad.Quarantined() != "" })
	if good.Quarantined() != "" {
		t.Fatalf("the innocent plugin was quarantined:\n%s", logs.String())
	}
	srv.Kill() // end the test's script the only way there is
}
