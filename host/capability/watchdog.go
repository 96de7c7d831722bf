package capability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quarantine defaults (Options.Quarantine).
const (
	// DefaultQuarantine is how long a plugin is quarantined the first time
	// its script kept Redis busy; each further time doubles it.
	DefaultQuarantine = 10 * time.Second
	// MaxQuarantine bounds the doubling.
	MaxQuarantine = 10 * time.Minute
	// quarantineForget is how long after its last strike a plugin's
	// back-off starts from DefaultQuarantine again.
	quarantineForget = time.Hour
)

// busyGrace is how long the watchdog lets the calls that Redis answered
// BUSY come back before it looks for the one still running: the culprit.
const busyGrace = 20 * time.Millisecond

// quarantine keeps a plugin whose script kept Redis busy from running until
// its back-off ends. It outlives reloads: it is kept by plugin name.
type quarantine struct {
	until atomic.Int64 // unix nanoseconds; 0 when never quarantined

	mu      sync.Mutex
	strikes int
	last    time.Time
	reason  string
}

// refuses returns why a call made at now must not run, or "".
func (q *quarantine) refuses(now time.Time) string {
	until := q.until.Load()
	if until == 0 || now.UnixNano() >= until {
		return ""
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.reason
}

// strike quarantines the plugin from now for its next back-off and returns
// the back-off and how many strikes it has had.
func (q *quarantine) strike(now time.Time, first time.Duration, reason string) (time.Duration, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if now.Sub(q.last) > quarantineForget {
		q.strikes = 0
	}
	q.strikes++
	q.last = now
	d := first << min(q.strikes-1, 16)
	d = min(d, max(MaxQuarantine, first))
	until := now.Add(d)
	q.reason = fmt.Sprintf("quarantined until %s: %s", until.UTC().Format(time.RFC3339), reason)
	q.until.Store(until.UnixNano())
	return d, q.strikes
}

// quarantineOf returns the quarantine of a plugin by name.
func (c *Capability) quarantineOf(plugin string) *quarantine {
	q, _ := c.quarantines.LoadOrStore(plugin, new(quarantine))
	return q.(*quarantine)
}

// Quarantined returns why the plugin's calls are refused now because one of
// its scripts kept Redis busy, or "" when they are not.
func (p *Plugin) Quarantined() string { return p.q.refuses(time.Now()) }

// running is one script call in flight, so that the watchdog can name the
// plugin whose script keeps Redis busy.
type running struct {
	prev, next *running
	list       *runningList // the list it is on while in flight
	plugin     string
	script     string
	node       string    // the master the call went to (nodeName), "" when unknown
	start      time.Time // when the call was made
	gaveUp     time.Time // when its caller stopped waiting for Redis's answer; zero while it waits
}

// maxGaveUp bounds the calls a capability remembers whose caller gave up
// (runningCalls.gaveUp): the newest are kept.
const maxGaveUp = 256

// runningLists is how many lists hold the calls in flight. Every call goes
// on one and comes off it again, so one list under one lock serialised the
// decision path: at GOMAXPROCS=8 that lock held 62 % of the path's mutex
// wait (a mutex profile of grpcapi's BenchmarkShouldRateLimit). Each call's
// start time picks its list.
const runningLists = 32

// runningCalls lists the calls in flight, and the calls whose caller gave up before Redis answered: a
// script that keeps Redis busy outlasts its caller's time-out, which can
// come before the watchdog looks (on a loaded machine, or before Redis
// answers BUSY), and it may be running still. Those stay suspects until
// their node answers a probe sent well after they gave up.
type runningCalls struct {
	lists [runningLists]runningList

	mu     sync.Mutex // guards gaveUp
	gaveUp []running  // in the order their callers gave up
}

// runningList is one list of calls in flight.
type runningList struct {
	mu   sync.Mutex
	root running // root.next is the first call to join, root.prev the last
}

// listOf returns the list for a call that started at t: a multiplicative
// hash of its nanoseconds, so that calls started together spread out even
// where the clock counts in coarser steps.
func (l *runningCalls) listOf(t time.Time) *runningList {
	return &l.lists[uint64(t.UnixNano())*0x9e3779b97f4a7c15>>(64-5)]
}

func (l *runningCalls) add(r *running) {
	list := l.listOf(r.start)
	r.list = list
	list.mu.Lock()
	if list.root.next == nil {
		list.root.next, list.root.prev = &list.root, &list.root
	}
	r.prev, r.next = list.root.prev, &list.root
	list.root.prev.next = r
	list.root.prev = r
	list.mu.Unlock()
}

// end takes r off the calls in flight; gaveUp says that its caller stopped
// waiting before Redis answered, so that it is remembered as a suspect.
func (l *runningCalls) end(r *running, gaveUp bool) {
	list := r.list
	list.mu.Lock()
	r.prev.next, r.next.prev = r.next, r.prev
	r.prev, r.next, r.list = nil, nil, nil
	list.mu.Unlock()
	if !gaveUp {
		return
	}
	l.mu.Lock()
	if len(l.gaveUp) == maxGaveUp {
		l.gaveUp = slices.Delete(l.gaveUp, 0, 1)
	}
	l.gaveUp = append(l.gaveUp, running{plugin: r.plugin, script: r.script, node: r.node, start: r.start, gaveUp: time.Now()})
	l.mu.Unlock()
}

// answered forgets the calls to node that gave up before `before`: the
// node answered a command that reached it after theirs, so none of their
// scripts runs there any more.
func (l *runningCalls) answered(node string, before time.Time) {
	l.mu.Lock()
	l.gaveUp = slices.DeleteFunc(l.gaveUp, func(r running) bool { return r.node == node && r.gaveUp.Before(before) })
	l.mu.Unlock()
}

// oldest returns a copy of the oldest call to node, in flight or given up
// on, that started before `before`, if there is one.
func (l *runningCalls) oldest(node string, before time.Time) (running, bool) {
	var found running
	ok := false
	for i := range l.lists {
		list := &l.lists[i]
		list.mu.Lock()
		// The whole list: calls that start together may join it out of
		// order. The watchdog asks rarely, and the lists hold the calls in
		// flight only.
		for r := list.root.next; r != nil && r != &list.root; r = r.next {
			if r.node == node && r.start.Before(before) && (!ok || r.start.Before(found.start)) {
				found, ok = running{plugin: r.plugin, script: r.script, node: r.node, start: r.start}, true
			}
		}
		list.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.gaveUp {
		if r.node == node && r.start.Before(before) && (!ok || r.start.Before(found.start)) {
			found, ok = r, true
		}
	}
	return found, ok
}

// nudgeWatchdog asks Probe to look at Redis now: a call was answered BUSY.
func (c *Capability) nudgeWatchdog() {
	select {
	case c.probeNow <- struct{}{}:
	default:
	}
}

// stopScript ends the script that keeps node busy and quarantines the
// plugin that ran it. A script that has not written is killed (SCRIPT
// KILL); one that wrote cannot be (UNKILLABLE): when the node is ruled's
// managed Redis, it is shut down without saving and its supervisor starts
// it again, else the operator is told what to do. busySince is when the
// probe was answered BUSY.
func (c *Capability) stopScript(ctx context.Context, node *redis.Client, busySince time.Time) {
	addr := node.Options().Addr
	select { // let the calls answered BUSY come back: the culprit's does not
	case <-ctx.Done():
		return
	case <-time.After(busyGrace):
	}
	local, haveLocal := c.running.oldest(nodeName(node), busySince)
	err := node.ScriptKill(ctx).Err()
	switch {
	case err == nil, redis.HasErrorPrefix(err, "NOTBUSY"): // killed, or it ended (another ruled may have killed it)
		killed := err == nil
		plugin, script, ok := c.slowlogCulprit(ctx, node)
		if !ok && haveLocal {
			plugin, script, ok = local.plugin, local.script, true
		}
		if killed {
			c.log.Warn("watchdog: killed a script that kept redis busy (SCRIPT KILL)", "node", addr, "plugin", plugin, "script", script)
		}
		if ok {
			c.quarantinePlugin(plugin, script, addr, "killed")
		}
	case redis.HasErrorPrefix(err, "UNKILLABLE"):
		if haveLocal {
			c.quarantinePlugin(local.plugin, local.script, addr, "unkillable: it wrote before it looped")
		}
		if c.restartUnkillable {
			c.log.Error("watchdog: a script that wrote keeps the managed redis busy and cannot be killed: "+
				"shutting it down without saving; its supervisor starts it again, empty", "node", addr,
				"plugin", local.plugin, "script", local.script)
			shutdownOnce(ctx, node)
			return
		}
		if last := c.unkillableLogged.Load(); time.Since(time.Unix(0, last)) > 10*time.Second {
			c.unkillableLogged.Store(time.Now().UnixNano())
			c.log.Error("watchdog: a script that wrote keeps redis busy and Redis refuses to kill it (UNKILLABLE); "+
				"decisions on this node follow on_error until it ends. To end it now, run SHUTDOWN NOSAVE on the node "+
				"(its writes since the last save are lost) and restart it", "node", addr,
				"plugin", local.plugin, "script", local.script)
		}
	default:
		c.log.Warn("watchdog: SCRIPT KILL failed", "node", addr, "err", err)
	}
}

// slowlogWindow is how recent a SLOWLOG entry must be (by Redis's clock,
// to the second) to name a culprit: the killed script's entry is a moment
// old, and an older one must not name a plugin whose quarantine for it
// (DefaultQuarantine) has just ended.
const slowlogWindow = 5 * time.Second

// slowlogCulprit names the plugin and script of the longest script call
// the node's SLOWLOG shows ending within slowlogWindow,
// leaving out plugins quarantined now (they were named for it already):
// after SCRIPT KILL, the killed one. It sees scripts run by every ruled
// instance.
func (c *Capability) slowlogCulprit(ctx context.Context, node *redis.Client) (plugin, script string, ok bool) {
	var logs []redis.SlowLog
	var now time.Time
	for range 10 { // the killed script ends at its next hook: BUSY until then
		var err error
		if logs, err = node.SlowLogGet(ctx, 32).Result(); err == nil {
			now, err = node.Time(ctx).Result()
		}
		if err == nil {
			break
		}
		if !redis.HasErrorPrefix(err, "BUSY") {
			return "", "", false
		}
		select {
		case <-ctx.Done():
			return "", "", false
		case <-time.After(10 * time.Millisecond):
		}
	}
	var longest time.Duration
	for _, l := range logs {
		if len(l.Args) < 2 || now.Sub(l.Time) > slowlogWindow || l.Duration <= longest {
			continue
		}
		if p, s := c.identify(l.Args); p != "" && c.quarantineOf(p).refuses(now) == "" {
			plugin, script, ok, longest = p, s, true, l.Duration
		}
	}
	return plugin, script, ok
}

// identify names the plugin and script of an EVALSHA or EVAL command line
// as SLOWLOG shows it (arguments cut at 128 bytes): by the script's hash,
// or the first line of its source, which Source makes name both; "" when
// it is not a script this capability registered.
func (c *Capability) identify(args []string) (plugin, script string) {
	switch {
	case strings.EqualFold(args[0], "evalsha"):
		if v, ok := c.byHash.Load(args[1]); ok {
			id := v.([2]string)
			return id[0], id[1]
		}
	case strings.EqualFold(args[0], "eval") && strings.HasPrefix(args[1], sourceTag):
		line, _, _ := strings.Cut(strings.TrimPrefix(args[1], sourceTag), "\n")
		plugin, script, _ = strings.Cut(line, "/")
		if _, registered := c.quarantines.Load(plugin); registered {
			return plugin, script
		}
	}
	return "", ""
}

// quarantinePlugin quarantines a plugin by name for its next back-off,
// unless it is quarantined now: one offence, however often it is seen
// (a script that cannot be killed stays BUSY for many probes), is one
// strike.
func (c *Capability) quarantinePlugin(plugin, script, node, how string) {
	q := c.quarantineOf(plugin)
	if q.refuses(time.Now()) != "" {
		return
	}
	reason := fmt.Sprintf("its script %s kept redis %s busy (%s)", script, node, how)
	d, strikes := q.strike(time.Now(), c.quarantineFirst, reason)
	c.log.Error("plugin quarantined: its script kept redis busy; its rules follow their on_error until the back-off ends",
		"plugin", plugin, "script", script, "node", node, "how", how, "for", d, "strikes", strikes)
}

// shutdownOnce sends SHUTDOWN NOSAVE to node on a connection of its own
// that never retries: the server closes the connection as it exits, and a
// retry would stop the server its supervisor has just started again.
func shutdownOnce(ctx context.Context, node *redis.Client) {
	opts := *node.Options()
	opts.MaxRetries, opts.PoolSize, opts.MinIdleConns = -1, 1, 0
	once := redis.NewClient(&opts)
	defer once.Close()
	_ = once.ShutdownNoSave(ctx).Err() // no reply to wait for
}
