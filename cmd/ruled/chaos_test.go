package main

// The chaos test: two ruled instances in their default configuration on a
// 6-node Redis Cluster (3 masters, 3 replicas) under a steady load spread
// over every master, while one node at a time is paused, loses the plugin
// users, refuses connections, runs out of memory, is killed, restarted and
// failed back. It asserts what docs/operations.md promises: a fault stays
// on its node, every decision keeps its time bound, every fault recovers by
// itself, and the limit holds.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// The load of the chaos test.
const (
	chaosLimit    = 25               // decisions per subject and window: most are admitted, so most go to Redis
	chaosWindow   = 10 * time.Second // the fixed window
	chaosRate     = 170              // decisions a second, both instances together
	chaosSubjects = 60               // client IPs, spread over every master
	chaosWorkers  = 8
)

// chaosBound bounds every decision as the client sees it: the documented
// bound, the default --decision-timeout (twice the 250 ms --redis-timeout),
// and 150 ms for HTTP on a loaded machine.
const chaosBound = host.DecisionTimeoutCalls*capability.DefaultTimeout + 150*time.Millisecond

var chaosRules = fmt.Sprintf(`rules:
  - name: chaos
    subject: request.ip
    plugin: fixedwindow
    config: {limit: %d, window: %s}
`, chaosLimit, chaosWindow)

// chaosSample is one decision of the chaos run.
type chaosSample struct {
	at, took time.Duration // when it was asked, since the run began; how long it took
	subject  int
	status   int
	degraded string
	errText  string
	allowed  bool  // a normal decision that admitted the request
	window   int64 // the fixed window it counted in (end, in windows since the epoch)
}

// abnormal reports whether the sample is not a normal decision.
func (s chaosSample) abnormal() bool {
	return s.degraded != "" || (s.status != http.StatusOK && s.status != http.StatusTooManyRequests)
}

// chaosLoad drives the load and keeps every sample.
type chaosLoad struct {
	daemons  []*daemon
	subjects []string
	client   *http.Client
	start    time.Time

	mu      sync.Mutex
	samples []chaosSample
	looks   []chaosLook
}

func (l *chaosLoad) since() time.Duration { return time.Since(l.start) }

// run sends chaosRate decisions a second until ctx ends, from
// chaosWorkers workers, each subject in turn, the instances in turn.
func (l *chaosLoad) run(ctx context.Context) {
	var wg sync.WaitGroup
	interval := time.Duration(chaosWorkers) * time.Second / chaosRate
	for w := range chaosWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(w) * interval / chaosWorkers)
			for i := w; ctx.Err() == nil; i += chaosWorkers {
				time.Sleep(time.Until(next))
				l.decide(i%len(l.subjects), l.daemons[(i/len(l.subjects))%len(l.daemons)])
				next = next.Add(interval)
				if now := time.Now(); next.Before(now.Add(-interval)) {
					next = now // no burst to catch up after a slow answer
				}
			}
		}()
	}
	wg.Wait()
}

// decide asks d about one request from subject i and keeps the sample.
func (l *chaosLoad) decide(i int, d *daemon) {
	body := fmt.Sprintf(`{"request": {"ip": %q, "path": "/"}}`, l.subjects[i])
	at := l.since()
	s := chaosSample{at: at, subject: i}
	resp, err := l.client.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		s.took, s.status, s.errText = l.since()-at, -1, err.Error()
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		s.took, s.status = l.since()-at, resp.StatusCode
		var r checkResult
		if err := json.Unmarshal(b, &r); err != nil || len(r.Results) != 1 {
			s.status, s.errText = -1, fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			rr := r.Results[0]
			s.degraded, s.errText = rr.Degraded, rr.Error
			s.allowed = rr.Allowed && rr.Degraded == ""
			end := time.Now().Add(time.Duration(rr.ResetMS) * time.Millisecond)
			s.window = (end.UnixMilli() + chaosWindow.Milliseconds()/2) / chaosWindow.Milliseconds()
		}
	}
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// chaosFault is one fault of the run: what it did to which node, when,
// and the subjects whose keys that node held.
type chaosFault struct {
	name          string
	node          string        // the faulted node's address
	down          bool          // its probe must find it down
	began, healed time.Duration // healed: when the fault was undone (the begin when it undoes itself)
	until         time.Duration // the end of the span judged for this fault
	masters       []string      // the masters at the end of the span
	on            map[int]bool  // subjects on the faulted node
	recoverWithin time.Duration // after healed
}

// chaosLook is one look at an instance's /readyz and /metrics.
type chaosLook struct {
	at      time.Duration
	inst    int
	ready   int
	why     string            // the body of /readyz
	redisUp string            // ruled_redis_up
	nodes   map[string]string // ruled_redis_node_up by node
}

// watch looks at every instance every 200 ms until ctx ends.
func (l *chaosLoad) watch(ctx context.Context) {
	for ctx.Err() == nil {
		for i, d := range l.daemons {
			look := chaosLook{at: l.since(), inst: i, nodes: map[string]string{}}
			if resp, err := l.client.Get(d.base + "/readyz"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				look.ready, look.why = resp.StatusCode, strings.TrimSpace(string(b))
				resp.Body.Close()
			}
			if resp, err := l.client.Get(d.base + "/metrics"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "ruled_redis_up "); ok {
						look.redisUp = v
					} else if rest, ok := strings.CutPrefix(line, `ruled_redis_node_up{node="`); ok {
						if node, v, ok := strings.Cut(rest, `"} `); ok {
							look.nodes[node] = v
						}
					}
				}
			}
			l.mu.Lock()
			l.looks = append(l.looks, look)
			l.mu.Unlock()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestChaosCluster is the chaos test, with ruled's default flags.
func TestChaosCluster(t *testing.T) { chaosCluster(t, true) }

// TestChaosClusterUnpipelined is the chaos test with each Redis call on a
// connection of its own (--redis-pipeline=false), the path where one node
// held every decision for seconds.
func TestChaosClusterUnpipelined(t *testing.T) { chaosCluster(t, false) }

// chaosCluster runs the chaos test against two instances, with pipelining
// or without. On the healthy masters no decision may be abnormal, and with
// pipelining fewer than 1% may take as long as a Redis call's time-out:
// none waits for the faulted master. Those are properties, not figures
// measured on a quiet machine, so that a loaded one does not break them.
func chaosCluster(t *testing.T, pipelined bool) {
	if testing.Short() {
		t.Skip("the chaos test runs for about a minute")
	}
	cl := redistest.StartCluster(t, 3, 1)
	ctx := context.Background()
	for _, n := range cl.Nodes() {
		// The setting docs/operations.md asks of a Cluster: one shard's
		// outage must not stop the others.
		if err := n.Client().ConfigSet(ctx, "cluster-require-full-coverage", "no").Err(); err != nil {
			t.Fatal(err)
		}
	}
	load := &chaosLoad{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2 * chaosWorkers}},
	}
	for range 2 {
		d := spawnDaemon(t, chaosRules, "--redis", cl.URL(), fmt.Sprintf("--redis-pipeline=%v", pipelined))
		d.waitReady(15 * time.Second)
		load.daemons = append(load.daemons, d)
	}
	masters := cl.Masters()
	perMaster := map[*redistest.Server]int{}
	for i := 0; len(load.subjects) < chaosSubjects; i++ {
		ip := fmt.Sprintf("198.51.%d.%d", 100+i/250, i%250)
		if m := cl.MasterForKey("{" + ip + "}"); perMaster[m] < chaosSubjects/len(masters) {
			perMaster[m]++
			load.subjects = append(load.subjects, ip)
		}
	}
	on := func(ms ...*redistest.Server) map[int]bool {
		set := map[int]bool{}
		for i, ip := range load.subjects {
			if slices.Contains(ms, cl.MasterForKey("{"+ip+"}")) {
				set[i] = true
			}
		}
		return set
	}

	runCtx, stop := context.WithCancel(ctx)
	load.start = time.Now()
	loaded := make(chan struct{})
	go func() {
		var wg sync.WaitGroup
		wg.Go(func() { load.watch(runCtx) })
		load.run(runCtx)
		wg.Wait()
		close(loaded)
	}()
	defer func() { stop(); <-loaded }()
	var faults []*chaosFault
	fault := func(name string, m *redistest.Server, recoverWithin time.Duration, begin func()) *chaosFault {
		f := &chaosFault{name: name, node: m.Addr(), on: on(m), recoverWithin: recoverWithin}
		f.began = load.since()
		begin()
		f.healed = f.began
		faults = append(faults, f)
		return f
	}
	admin := func(m *redistest.Server, args ...any) {
		if err := m.Client().Do(ctx, args...).Err(); err != nil {
			t.Errorf("%v on %s: %v", args, m.Addr(), err)
		}
	}
	end := func(f *chaosFault) {
		f.until = load.since()
		for _, m := range cl.Masters() {
			f.masters = append(f.masters, m.Addr())
		}
	}
	const faultFor, settle = 4 * time.Second, 4 * time.Second
	baseline := 8 * time.Second
	time.Sleep(baseline)

	// A master stops answering for 4 s: Redis ends the pause itself, 4 s
	// after it took the command, which is before it answered.
	f := fault("paused (CLIENT PAUSE 4000)", masters[0], 2*time.Second, func() { admin(masters[0], "CLIENT", "PAUSE", faultFor.Milliseconds(), "ALL") })
	f.healed = load.since() + faultFor
	f.down = true
	time.Sleep(faultFor + settle)
	end(f)

	// A master loses the plugins' ACL users: ruled must set them up again.
	f = fault("plugin users deleted", masters[1], 3*time.Second, func() { admin(masters[1], "ACL", "DELUSER", capability.ACLUser("fixedwindow")) })
	time.Sleep(settle)
	end(f)

	// A master refuses every new connection (maxclients reached) and drops
	// the ones it had.
	// One connection of the test's own does it and undoes it.
	conn := masters[2].Client().Conn()
	defer conn.Close()
	f = fault("refusing connections (maxclients)", masters[2], 3*time.Second, func() {
		for _, args := range [][]any{{"CONFIG", "SET", "maxclients", "1"}, {"CLIENT", "KILL", "SKIPME", "yes"}} {
			if err := conn.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
	})
	f.down = true
	time.Sleep(faultFor)
	if err := conn.Do(ctx, "CONFIG", "SET", "maxclients", "10000").Err(); err != nil {
		t.Fatal(err)
	}
	f.healed = load.since()
	time.Sleep(settle)
	end(f)

	// A master out of memory answers every write with OOM.
	f = fault("out of memory (maxmemory 1)", masters[0], 2*time.Second, func() { admin(masters[0], "CONFIG", "SET", "maxmemory", "1") })
	time.Sleep(faultFor)
	admin(masters[0], "CONFIG", "SET", "maxmemory", "0")
	f.healed = load.since()
	time.Sleep(settle)
	end(f)

	// A master is killed: its replica takes over.
	killed := masters[1]
	f = fault("killed (kill -9)", killed, 2*redistest.ClusterNodeTimeout+3*time.Second, killed.Kill)
	f.down = true
	time.Sleep(2*redistest.ClusterNodeTimeout + 2*settle)
	end(f)

	// It comes back, as a replica of the promoted one.
	var promoted *redistest.Server // the replica that took over
	for i := range f.on {
		promoted = cl.MasterForKey("{" + load.subjects[i] + "}")
	}
	f = fault("restarted (rejoins as a replica)", killed, 2*time.Second, killed.Restart)
	cl.WaitHealthy(20 * time.Second)
	time.Sleep(settle)
	end(f)

	// Failback: the restarted node takes its slots back.
	f = fault("failback (CLUSTER FAILOVER)", promoted, 3*time.Second, func() { admin(killed, "CLUSTER", "FAILOVER") })
	time.Sleep(2 * settle)
	end(f)

	// Re-sharding: half the slots of one master move, keys and all, to another
	// (redis-cli --cluster reshard: the keys are MIGRATEd slot by slot, and
	// calls for a slot in flight are redirected with ASK, then MOVED).
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatal(err)
	}
	id := func(m *redistest.Server) string {
		v, err := m.Client().Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	from, to := masters[2], masters[0]
	fromSubjects := on(from)
	// Both masters work: the other one's subjects are the healthy ones.
	f = fault("re-sharding (half a master's slots moved)", from, 2*time.Second, func() {
		out, err := exec.Command(cli, "--cluster", "reshard", from.Addr(), "--cluster-from", id(from), "--cluster-to", id(to),
			"--cluster-slots", "2730", "--cluster-yes").CombinedOutput()
		if err != nil {
			t.Errorf("redis-cli --cluster reshard: %v\n%s", err, tail(string(out), 10))
		}
	})
	f.healed = load.since()
	f.on = on(from, to)
	moved := 0
	for i := range fromSubjects {
		if cl.MasterForKey("{"+load.subjects[i]+"}") == to {
			moved++
		}
	}
	t.Logf("re-sharding took %v and moved %d of the %d subjects on %s", (f.healed - f.began).Round(time.Millisecond), moved, len(fromSubjects), from.Addr())
	if moved == 0 {
		t.Error("re-sharding moved no subject: the fault tested nothing")
	}
	time.Sleep(settle)
	end(f)

	time.Sleep(settle)
	stop()
	<-loaded
	load.judge(t, baseline, faults, pipelined)
}

// judge asserts what the run must show, and logs the figures.
func (l *chaosLoad) judge(t *testing.T, baseline time.Duration, faults []*chaosFault, pipelined bool) {
	t.Helper()
	samples := l.samples
	if len(samples) == 0 {
		t.Fatal("no decisions")
	}
	took := func(keep func(chaosSample) bool) (p50, p99, worst time.Duration, n, bad int) {
		var d []time.Duration
		for _, s := range samples {
			if keep(s) {
				d = append(d, s.took)
				if s.abnormal() {
					bad++
				}
			}
		}
		if len(d) == 0 {
			return 0, 0, 0, 0, 0
		}
		slices.Sort(d)
		return d[len(d)/2], d[len(d)*99/100], d[len(d)-1], len(d), bad
	}
	warm := 2 * time.Second
	b50, b99, bmax, bn, bbad := took(func(s chaosSample) bool { return s.at >= warm && s.at < baseline })
	t.Logf("no fault: %d decisions, p50 %v p99 %v max %v, %d abnormal", bn, b50, b99, bmax, bbad)
	if bbad > 0 {
		t.Errorf("%d abnormal decisions before any fault", bbad)
	}
	for _, f := range faults {
		in := func(s chaosSample) bool { return s.at >= f.began && s.at < f.until }
		h50, h99, hmax, hn, hbad := took(func(s chaosSample) bool { return in(s) && !f.on[s.subject] })
		_, f99, fmax, fn, fbad := took(func(s chaosSample) bool { return in(s) && f.on[s.subject] })
		var last time.Duration // the last abnormal decision on the faulted node
		for _, s := range samples {
			if in(s) && f.on[s.subject] && s.abnormal() {
				last = max(last, s.at+s.took)
			}
		}
		normalAfter := max(last-f.healed, 0)
		t.Logf("%s: other nodes %d decisions p50 %v p99 %v max %v, %d abnormal; its node %d decisions p99 %v max %v, %d abnormal, normal %v after it was undone",
			f.name, hn, h50, h99, hmax, hbad, fn, f99, fmax, fbad, normalAfter.Round(time.Millisecond))
		if hbad > 0 {
			t.Errorf("%s: %d abnormal decisions on the other nodes", f.name, hbad)
		}
		// A decision that waited for the faulted node took at least a
		// call's time-out, or followed on_error when its own ran out (an
		// abnormal decision, above). Noise on a loaded machine delays a few
		// decisions by tens of ms; a fault that spreads, most of them.
		if pipelined && h99 >= capability.DefaultTimeout {
			t.Errorf("%s: p99 on the other nodes %v: 1%% of their decisions waited as long as a Redis call's time-out (%v)", f.name, h99, capability.DefaultTimeout)
		}
		if worst := max(hmax, fmax); worst > chaosBound {
			t.Errorf("%s: a decision took %v, over the bound %v", f.name, worst, chaosBound)
		}
		if normalAfter > f.recoverWithin {
			t.Errorf("%s: decisions on its node normal %v after it was undone, want within %v", f.name, normalAfter, f.recoverWithin)
		}
	}
	// Over-admission: normal decisions never admit more than the limit in
	// a window, but for what a failover loses (writes not yet replicated).
	admitted := map[[2]int64]int{}
	total, over := 0, 0
	for _, s := range samples {
		if s.allowed {
			admitted[[2]int64{int64(s.subject), s.window}]++
			total++
		}
	}
	for _, n := range admitted {
		over += max(n-chaosLimit, 0)
	}
	t.Logf("over-admission: %d of %d admitted (%.2f%%)", over, total, 100*float64(over)/float64(max(total, 1)))
	if over*50 > total {
		t.Errorf("over-admission %d of %d admitted, want within 2%%", over, total)
	}
	last := samples[len(samples)-1].at
	for _, s := range samples {
		if s.at > last-3*time.Second && s.abnormal() {
			t.Errorf("a decision at the end of the run is not normal: %+v", s)
			break
		}
	}
	l.judgeHealth(t, faults)
}

// judgeHealth asserts that /readyz and the Redis metrics told the truth:
// ready throughout (a one-node fault leaves the other masters serving), the
// faulted node reported down within 2 s where its probe cannot reach it,
// and at the end of each fault's span every master of the Cluster, and only
// those, reported up, with ruled_redis_up 1.
func (l *chaosLoad) judgeHealth(t *testing.T, faults []*chaosFault) {
	t.Helper()
	if len(l.looks) == 0 {
		t.Fatal("no look at /readyz and /metrics")
	}
	for _, look := range l.looks {
		if look.ready != http.StatusOK {
			t.Errorf("instance %d: /readyz %d (%s) at %v, want 200 throughout", look.inst, look.ready, look.why, look.at)
			break
		}
	}
	for _, f := range faults {
		for inst := range l.daemons {
			var seenDown time.Duration = -1
			var final *chaosLook
			for i := range l.looks {
				look := &l.looks[i]
				if look.inst != inst || look.at < f.began || look.at >= f.until {
					continue
				}
				if seenDown < 0 && look.nodes[f.node] == "0" {
					seenDown = look.at - f.began
				}
				final = look
			}
			if f.down && (seenDown < 0 || seenDown > 2*time.Second) {
				t.Errorf("%s: instance %d reported %s down after %v, want within 2s", f.name, inst, f.node, seenDown)
			}
			if final == nil {
				t.Errorf("%s: no look at instance %d", f.name, inst)
				continue
			}
			var up []string
			for node, v := range final.nodes {
				if v == "1" {
					up = append(up, node)
				}
			}
			slices.Sort(up)
			slices.Sort(f.masters)
			if final.redisUp != "1" || len(final.nodes) != len(f.masters) || !slices.Equal(up, f.masters) {
				t.Errorf("%s: at the end, instance %d reports ruled_redis_up %s and nodes %v; want 1 and the masters %v up",
					f.name, inst, final.redisUp, final.nodes, f.masters)
			}
		}
	}
}
