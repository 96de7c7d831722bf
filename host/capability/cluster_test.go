package capability_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// twoKeys writes two keys of one decision, as most plugins do (a counter
// and a log, say): on a Cluster it fails with CROSSSLOT unless both keys
// hash to one slot.
var twoKeys = sdk.Script{Name: "two", Source: `redis.call('INCR', KEYS[1])
redis.call('INCRBY', KEYS[2], 2)
return KEYS`}

// awkwardSubjects are subjects of many shapes, braces and glob characters
// included, plus enough plain ones to reach every master.
func awkwardSubjects() []string {
	s := []string{"a", "203.0.113.7", "2001:db8::1", "user@example.com", "{x}", "}{", "x}", "{", "}", "a{b}c", "{}",
		"tenant:{acme}:user:1", "%7B", "#x", "\x00", "\xff\xfe", "é", " spaces and *globs?* [a-z] \\",
		strings.Repeat("a", 128), strings.Repeat("a", 129), strings.Repeat("{}", 100)}
	for i := range 30 {
		s = append(s, fmt.Sprintf("subject-%d", i))
	}
	return s
}

// newClusterCap returns a capability over a new cluster client,
// autopipelined when pipe is set.
func newClusterCap(t *testing.T, cl *redistest.Cluster, pipe *redis.AutoPipelineOptions) *capability.Capability {
	t.Helper()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
	t.Cleanup(func() { _ = cc.Close() })
	return capability.New(cc, capability.Options{Timeout: 2 * time.Second, Pipeline: pipe})
}

// pipeModes are the ways the capability sends script calls.
var pipeModes = []struct {
	name string
	pipe *redis.AutoPipelineOptions
}{{"direct", nil}, {"autopipelined", redis.DefaultBlockingAutoPipelineOptions()}}

func keysOf(t *testing.T, r sdk.Reply) []string {
	t.Helper()
	arr, err := r.Array()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range arr {
		s, _ := k.Str()
		keys = append(keys, s)
	}
	return keys
}

// TestCluster runs the capability against a 3-master Redis Cluster,
// started once for all its subtests.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()

	for _, mode := range pipeModes {
		t.Run("keys-of-one-decision-share-a-slot/"+mode.name, func(t *testing.T) {
			testOneSlot(t, cl, newClusterCap(t, cl, mode.pipe), "rule-"+mode.name)
		})
	}

	t.Run("preload-loads-on-every-master", func(t *testing.T) {
		script := sdk.Script{Name: "pre", Source: `return 'preloaded on every master'`}
		p, err := newClusterCap(t, cl, nil).Register("preload", []sdk.Script{script, twoKeys})
		if err != nil {
			t.Fatal(err)
		}
		hashes := []string{redis.NewScript(capability.Source("preload", script.Name, script.Source)).Hash(), redis.NewScript(capability.Source("preload", twoKeys.Name, twoKeys.Source)).Hash()}
		masters := cl.Masters()
		if len(masters) != 3 {
			t.Fatalf("%d masters, want 3", len(masters))
		}
		if err := cl.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := p.Preload(ctx); err != nil {
			t.Fatal(err)
		}
		for _, m := range masters {
			exists, err := m.Client().ScriptExists(ctx, hashes...).Result()
			if err != nil || len(exists) != 2 || !exists[0] || !exists[1] {
				t.Fatalf("SCRIPT EXISTS on master %s: %v, %v; want both scripts loaded", m.Addr(), exists, err)
			}
		}
		// Flushed again everywhere, calls on every master still work (EVAL
		// on NOSCRIPT, node by node).
		if err := cl.Client().ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for _, subject := range awkwardSubjects() {
			if _, err := p.Host("after-flush", subject).Eval(ctx, "two", []string{"a", "b"}); err != nil {
				t.Fatalf("subject %q after SCRIPT FLUSH: %v", subject, err)
			}
		}
	})

	t.Run("reset-finds-the-subjects-node", func(t *testing.T) {
		p, err := newClusterCap(t, cl, nil).Register("reset", []sdk.Script{twoKeys})
		if err != nil {
			t.Fatal(err)
		}
		subjects := append([]string{"a", "a*", "[a]", "b", "\\", "a?"}, awkwardSubjects()...)
		for _, s := range subjects {
			for _, rule := range []string{"r", "other"} {
				if _, err := p.Host(rule, s).Eval(ctx, "two", []string{"counter", "log"}); err != nil {
					t.Fatalf("subject %q: %v", s, err)
				}
			}
		}
		seen := map[string]bool{}
		for _, s := range subjects {
			if seen[s] {
				continue
			}
			seen[s] = true
			prefix := p.KeyPrefix("r", s)
			m := cl.MasterForKey(prefix)
			n, err := p.Reset(ctx, "r", s)
			if err != nil || n != 2 {
				t.Fatalf("Reset(r, %q) on %s: %d, %v; want 2 keys", s, m.Addr(), n, err)
			}
			if left, err := m.Client().Exists(ctx, prefix+"counter", prefix+"log").Result(); err != nil || left != 0 {
				t.Fatalf("subject %q: %d keys left, %v", s, left, err)
			}
			other := p.KeyPrefix("other", s)
			if left, err := cl.MasterForKey(other).Client().Exists(ctx, other+"counter", other+"log").Result(); err != nil || left != 2 {
				t.Fatalf("subject %q: rule other kept %d of 2 keys, %v", s, left, err)
			}
			if n, err := p.Reset(ctx, "r", s); err != nil || n != 0 {
				t.Fatalf("second Reset(r, %q): %d, %v; want 0", s, n, err)
			}
		}
	})
}

// testOneSlot runs a two-key script for subjects of many shapes and checks
// that both keys land in the slot of the subject's hash tag, on the master
// that serves it, and that the subjects spread over every master.
func testOneSlot(t *testing.T, cl *redistest.Cluster, c *capability.Capability, rule string) {
	ctx := context.Background()
	p, err := c.Register("slots", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	// All at once, so that autopipelined calls for many slots share batches
	// (and meet NOSCRIPT there: nothing is preloaded).
	subjects := awkwardSubjects()
	replies := make([]sdk.Reply, len(subjects))
	errs := make([]error, len(subjects))
	var wg sync.WaitGroup
	for i, subject := range subjects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies[i], errs[i] = p.Host(rule, subject).Eval(ctx, "two", []string{"counter", "log"})
		}()
	}
	wg.Wait()
	masters := map[*redistest.Server]int{}
	for i, subject := range subjects {
		if errs[i] != nil {
			t.Fatalf("subject %q: %v", subject, errs[i])
		}
		keys := keysOf(t, replies[i])
		slot := cl.KeySlot(keys[0])
		if len(keys) != 2 || cl.KeySlot(keys[1]) != slot {
			t.Fatalf("subject %q: keys %q in different slots", subject, keys)
		}
		// The hash tag is the escaped subject, nothing more.
		if want := cl.KeySlot("{" + capability.EscapeSubject(subject) + "}"); slot != want {
			t.Fatalf("subject %q: slot %d, want %d (its escaped form's)", subject, slot, want)
		}
		m := cl.MasterForKey(keys[0])
		masters[m]++
		for i, want := range []string{"1", "2"} {
			if got, err := m.Client().Get(ctx, keys[i]).Result(); err != nil || got != want {
				t.Fatalf("subject %q: %s on %s = %q, %v; want %s", subject, keys[i], m.Addr(), got, err, want)
			}
		}
	}
	if len(masters) != 3 {
		t.Fatalf("subjects reached %d masters, want all 3: %v", len(masters), masters)
	}
}

// TestIsolatedCallsFollowASK: while a subject's slot migrates and its keys
// have already moved, Redis redirects its calls with ASK. The plugin's own
// ACL user may send ASKING, so the call runs on the importing master and
// finds the keys there, pipelined or not: a re-sharding costs no decision.
func TestIsolatedCallsFollowASK(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	options := func(user, pass string) *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: cl.Addrs(), Username: user, Password: pass, ContextTimeoutEnabled: true,
			ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, DisableRoutingPolicies: true}
	}
	myID := func(s *redistest.Server) string {
		id, err := s.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	for _, mode := range pipeModes {
		t.Run(mode.name, func(t *testing.T) {
			cc := redis.NewClusterClient(options("", ""))
			t.Cleanup(func() { _ = cc.Close() })
			iso := &capability.Isolation{ClientAs: func(user, pass string) (redis.UniversalClient, error) {
				c := redis.NewClusterClient(options(user, pass))
				t.Cleanup(func() { _ = c.Close() })
				return c, nil
			}}
			c := capability.New(cc, capability.Options{Timeout: 2 * time.Second, Pipeline: mode.pipe, Isolation: iso})
			counted := twoKeys
			counted.Commands = []string{"INCR", "INCRBY"}
			p, err := c.Register("asker", []sdk.Script{counted})
			if err != nil {
				t.Fatal(err)
			}
			subject := "migrating-" + mode.name
			h := p.Host("r", subject)
			if _, err := h.Eval(ctx, "two", []string{"a", "b"}); err != nil {
				t.Fatal(err)
			}
			prefix := p.KeyPrefix("r", subject)
			slot := cl.KeySlot(prefix)
			from := cl.MasterForKey(prefix)
			var to *redistest.Server
			for _, m := range cl.Masters() {
				if m != from {
					to = m
				}
			}
			fromID, toID := myID(from), myID(to)
			for _, step := range []struct {
				on   *redistest.Server
				args []any
			}{
				{to, []any{"CLUSTER", "SETSLOT", slot, "IMPORTING", fromID}},
				{from, []any{"CLUSTER", "SETSLOT", slot, "MIGRATING", toID}},
				{from, []any{"MIGRATE", "127.0.0.1", to.Port, "", 0, 5000, "KEYS", prefix + "a", prefix + "b"}},
			} {
				if err := step.on.Client().Do(ctx, step.args...).Err(); err != nil {
					t.Fatalf("%v: %v", step.args, err)
				}
			}
			if _, err := h.Eval(ctx, "two", []string{"a", "b"}); err != nil {
				t.Fatalf("a call while its slot migrates: %v", err)
			}
			conn := to.Client().Conn()
			defer conn.Close()
			if err := conn.Do(ctx, "ASKING").Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := conn.Get(ctx, prefix+"a").Int(); err != nil || n != 2 {
				t.Fatalf("the counter on the importing master: %d (%v), want 2: the call ran there, on the moved keys", n, err)
			}
			for _, m := range []*redistest.Server{to, from} {
				if err := m.Client().Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := h.Eval(ctx, "two", []string{"a", "b"}); err != nil {
				t.Fatalf("a call after the migration: %v", err)
			}
		})
	}
}

// TestPipelinesNeverWaitForAnotherMaster: one master of three stops (SIGSTOP)
// while 8 callers keep calls for it in flight and 8 others call the other
// masters, autopipelined as ruled sends them. The stopped master's calls run
// out of their time-out; every call for the others is answered, and none
// waits for the stopped one: each takes less than the time-out, which is
// what a call that shared a batch with the stopped master's would take. The
// time-out is 1 s, far above what a loaded machine adds to a call.
func TestPipelinesNeverWaitForAnotherMaster(t *testing.T) {
	const timeout = time.Second
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	for _, n := range cl.Nodes() { // the stopped master's slots must not stop the others
		if err := n.Client().ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true, MaxRetries: -1,
		ReadTimeout: timeout, WriteTimeout: timeout})
	t.Cleanup(func() { _ = cc.Close() })
	c := capability.New(cc, capability.Options{Timeout: timeout, Pipeline: redis.DefaultBlockingAutoPipelineOptions()})
	p := register(t, c, "pipes", goodScript)
	master := func(s string) *redistest.Server { return cl.MasterForKey("{" + capability.EscapeSubject(s) + "}") }
	all := awkwardSubjects()
	stopped := master(all[0])
	var onStopped, others []string
	for _, s := range all {
		if _, err := p.Host("r", s).Eval(ctx, "good", []string{"n"}); err != nil { // scripts loaded, connections open
			t.Fatal(err)
		}
		if master(s) == stopped {
			onStopped = append(onStopped, s)
		} else {
			others = append(others, s)
		}
	}
	stopped.Pause()
	defer stopped.Resume()

	var mu sync.Mutex
	var answered, failed, slow, stoppedFailed int
	var worst time.Duration
	var wg sync.WaitGroup
	end := time.Now().Add(2 * time.Second)
	for g := range 16 {
		subjects := [][]string{others, onStopped}[g%2]
		wg.Go(func() {
			for i := g; time.Now().Before(end); i++ {
				start := time.Now()
				_, err := p.Host("r", subjects[i%len(subjects)]).Eval(ctx, "good", []string{"n"})
				took := time.Since(start)
				mu.Lock()
				switch {
				case g%2 == 1:
					if err != nil {
						stoppedFailed++
					}
				case err != nil:
					failed++
				case took >= timeout:
					slow++
				default:
					answered++
					worst = max(worst, took)
				}
				mu.Unlock()
				if g%2 == 1 {
					time.Sleep(time.Millisecond) // an open circuit fails at once: no busy loop
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%d calls for the other masters answered, the slowest in %v; %d calls for the stopped one failed", answered, worst, stoppedFailed)
	if stoppedFailed == 0 {
		t.Fatal("no call for the stopped master failed: the fault tested nothing")
	}
	if failed > 0 || slow > 0 {
		t.Fatalf("%d calls for the other masters failed and %d took the time-out (%v) or more: they waited for the stopped master", failed, slow, timeout)
	}
}
