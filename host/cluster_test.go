package host_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// resumeBudget bounds how long after a master is killed normal decisions
// must be back: two cluster-node-timeouts for the replica to take over,
// plus slack for the client to learn the new topology on a loaded machine.
const resumeBudget = 10 * time.Second

// newClusterEngine returns an engine on the cluster at url, its client
// built by host/store as `ruled serve --redis url` builds it, autopipelined
// when pipe is set.
func newClusterEngine(t *testing.T, url, yaml string, pipe *redis.AutoPipelineOptions) *host.Engine {
	t.Helper()
	st, err := store.Open(context.Background(), store.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if _, ok := st.Client().(*redis.ClusterClient); !ok {
		t.Fatalf("store client for %s is a %T, want a cluster client", url, st.Client())
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(st.Client(), capability.Options{Pipeline: pipe}), Plugins: builtin.All()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatalf("load: %v", err)
	}
	return e
}

// outcome tallies decisions by how each rule decided ("" when its plugin
// did, else the on_error policy applied).
type outcome struct {
	mu     sync.Mutex
	counts map[string]int
	errs   map[string]int
	// lastDegraded is when the latest degraded decision ended; resumed is
	// when the first normal decision that started after a degraded one
	// ended (unix nanoseconds, 0 when none yet).
	lastDegraded atomic.Int64
	resumed      atomic.Int64
}

func newOutcome() *outcome { return &outcome{counts: map[string]int{}, errs: map[string]int{}} }

// record checks one result against the rules' failure policies.
func (o *outcome) record(t *testing.T, started time.Time, res host.Result, rules int) {
	ended := time.Now().UnixNano()
	if len(res.Results) != rules {
		t.Errorf("%d results, want %d: %+v", len(res.Results), rules, res)
		return
	}
	key, degraded := "", false
	for _, r := range res.Results {
		key += string(r.Degraded) + ","
		want := map[string]host.Degraded{"open": host.DegradedAllow, "local": host.DegradedLocal, "closed": host.DegradedDeny}[r.Rule]
		switch {
		case r.Degraded == host.DegradedNone && (r.Err != nil || !r.Allowed):
			t.Errorf("rule %s decided by its plugin: allowed %v, err %v; want allowed", r.Rule, r.Allowed, r.Err)
		case r.Degraded != host.DegradedNone && r.Degraded != want:
			t.Errorf("rule %s degraded as %q, want its on_error %q", r.Rule, r.Degraded, want)
		case r.Degraded != host.DegradedNone && !capability.Unavailable(r.Err):
			t.Errorf("rule %s degraded by %v (class %q), want Redis unavailable", r.Rule, r.Err, capability.ClassOf(r.Err))
		}
		if r.Degraded != host.DegradedNone {
			degraded = true
			o.mu.Lock()
			o.errs[errorKind(r.Err)]++
			o.mu.Unlock()
		}
	}
	if degraded {
		o.lastDegraded.Store(ended)
	} else if last := o.lastDegraded.Load(); last != 0 && started.UnixNano() > last {
		o.resumed.CompareAndSwap(0, ended)
	}
	o.mu.Lock()
	o.counts[key]++
	o.mu.Unlock()
}

// errorKind shortens a degraded decision's error for the log.
func errorKind(err error) string {
	var ce *capability.Error
	if !errors.As(err, &ce) {
		return fmt.Sprint(err)
	}
	msg := ce.Err.Error()
	if len(msg) > 40 {
		msg = msg[:40]
	}
	return string(ce.Class) + ": " + msg
}

// count returns how many decisions had the outcome key.
func (o *outcome) count(key string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[key]
}

func (o *outcome) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []string
	for k, n := range o.errs {
		errs = append(errs, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(errs)
	return fmt.Sprintf("outcomes %v, degraded by %v", o.counts, errs)
}

// TestClusterMasterFailover kills the master that holds a busy subject
// while several goroutines decide for it: decisions follow each rule's
// on_error until a replica has taken over, then come from Redis again.
// It does so with and without autopipelining, on one cluster: the killed
// node is restarted after the first run and rejoins as a replica.
func TestClusterMasterFailover(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	t.Run("direct", func(t *testing.T) { testFailover(t, cl, nil) })
	t.Run("autopipelined", func(t *testing.T) { testFailover(t, cl, redis.DefaultBlockingAutoPipelineOptions()) })
}

func testFailover(t *testing.T, cl *redistest.Cluster, pipe *redis.AutoPipelineOptions) {
	e := newClusterEngine(t, cl.URL(), policyRules, pipe)

	const ip = "192.0.2.7"
	master := cl.MasterForKey("{" + ip + "}")
	// A bystander subject on another master: with the default
	// cluster-require-full-coverage, the whole cluster refuses commands
	// while a slot has no master, so it degrades too.
	bystander := ""
	for i := 1; bystander == ""; i++ {
		if b := fmt.Sprintf("198.51.100.%d", i); cl.MasterForKey("{"+b+"}") != master {
			bystander = b
		}
	}

	busy, other := newOutcome(), newOutcome()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	run := func(o *outcome, ip, path string, rules int) {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			started := time.Now()
			res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: ip, Path: path}, Hits: 1})
			o.record(t, started, res, rules)
			time.Sleep(time.Millisecond) // leave the 2-core CI machine some room
		}
	}
	for range 6 {
		wg.Add(1)
		go run(busy, ip, "/closed", 3)
	}
	wg.Add(1)
	go run(other, bystander, "/", 2)
	defer func() { close(stop); wg.Wait() }()

	time.Sleep(300 * time.Millisecond)
	if busy.count(",,,") == 0 {
		t.Fatalf("no normal decisions before the kill: %v", busy)
	}
	master.Kill()
	killed := time.Now()
	cl.WaitHealthy(resumeBudget)
	failedOver := time.Since(killed)
	for busy.resumed.Load() == 0 && time.Since(killed) < resumeBudget {
		time.Sleep(10 * time.Millisecond)
	}
	resumed := busy.resumed.Load()
	if resumed == 0 {
		t.Fatalf("no normal decision within %v of killing master %s (replica took over after %v); %v",
			resumeBudget, master.Addr(), failedOver, busy)
	}
	// Normal decisions keep coming, for the bystander too.
	time.Sleep(300 * time.Millisecond)
	settled := time.Now().UnixNano()
	time.Sleep(300 * time.Millisecond)
	t.Logf("killed master %s: replica took over after %v; normal decisions resumed %v after the kill",
		master.Addr(), failedOver.Round(time.Millisecond), time.Duration(resumed-killed.UnixNano()).Round(time.Millisecond))
	t.Logf("subject %s: %v", ip, busy)
	t.Logf("bystander %s on another master: %v", bystander, other)
	if busy.count("allow,local,deny,") == 0 {
		t.Fatalf("no degraded decisions while the master was down: %v", busy)
	}
	for name, o := range map[string]*outcome{ip: busy, bystander: other} {
		if last := o.lastDegraded.Load(); last > settled {
			t.Errorf("%s: degraded decisions %v after normal ones resumed: %v", name, time.Duration(last-resumed), o)
		}
	}
	// Back to full strength for whatever runs next: the old master rejoins
	// as a replica of the one that took over.
	master.Restart()
	cl.WaitHealthy(15 * time.Second)
	if cl.MasterForKey("{"+ip+"}") == master {
		t.Fatalf("restarted node %s took its slots back", master.Addr())
	}
}
