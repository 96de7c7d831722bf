package capability

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultProbeEvery is how often Probe asks every master whether it serves.
const DefaultProbeEvery = time.Second

// errNotProbed is RedisErr's answer before the first probe ended.
var errNotProbed = errors.New("redis not probed yet")

// health is what the last probe found.
type health struct {
	mu    sync.Mutex
	err   error                  // nil while every master answered; errNotProbed before the first probe
	nodes map[string]*nodeHealth // master address → what its probe found
}

// nodeHealth is what the probe found of one master.
type nodeHealth struct {
	err   error // nil when it answered and serves
	took  time.Duration
	runID string // to see restarts and switches
}

// NodeHealth is what the last probe found of one Redis master, and the
// state of its circuit breaker.
type NodeHealth struct {
	// Node is the master's address (the unix socket of a managed Redis,
	// "sentinel-master" behind Sentinel).
	Node string `json:"node"`
	// Up is true when the master answered the last probe and, on a
	// Cluster, reported cluster_state:ok.
	Up bool `json:"up"`
	// Error says why the master is not up.
	Error string `json:"error,omitempty"`
	// ProbeMS is how long the last probe took, in milliseconds.
	ProbeMS float64 `json:"probe_ms"`
	// CircuitOpen is true while calls to the master fail fast.
	CircuitOpen bool `json:"circuit_open"`
}

// Probe asks every master for INFO server each interval (DefaultProbeEvery
// when every <= 0) until ctx ends, each within the capability's time-out.
// Its result is RedisErr, and it calls Options.OnAvailability when it
// changes. A master that answers with a new run_id restarted or is another
// server (a Sentinel switch, a Cluster promotion): the plugin users are set
// up on every node at once, before a call has to find them missing.
//
// Probe is also the script watchdog: a master that answers BUSY (to the
// probe, or to a call, which makes the probe run at once) is running a
// script past its busy-reply-threshold. The watchdog stops it (see
// stopScript) and quarantines the plugin that ran it: its calls fail with
// ClassQuarantine for Options.Quarantine, doubled at each new offence.
func (c *Capability) Probe(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultProbeEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		c.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.probeNow:
			// Calls answered BUSY: look now, but not more often than
			// the watchdog can act.
			select {
			case <-ctx.Done():
				return
			case <-time.After(nudgeGap):
			}
		}
	}
}

// nudgeGap is the least time between two probes that calls asked for.
const nudgeGap = 50 * time.Millisecond

// probeOnce runs one probe of every master. Masters that left the
// topology are forgotten, with their breakers; a master that answers has
// its breaker closed at once, before a call has to find it answering.
func (c *Capability) probeOnce(parent context.Context) {
	// On a Cluster, listing the masters reloads the slot map first, from
	// nodes in turn: a stopped node costs that its read time-out. Each
	// master's probe has the capability's time-out of its own.
	ctx, cancel := context.WithTimeout(parent, 4*c.timeout)
	defer cancel()
	var mu sync.Mutex
	found := map[string]*nodeHealth{}
	_, cluster := c.client.(*redis.ClusterClient)
	probe := func(ctx context.Context, node *redis.Client) error {
		start := time.Now()
		nh := &nodeHealth{}
		ctx, cancel := context.WithTimeout(ctx, c.timeout)
		nh.runID, nh.err = c.probeNode(ctx, parent, node, cluster)
		cancel()
		nh.took = time.Since(start)
		mu.Lock()
		found[nodeName(node)] = nh
		mu.Unlock()
		return nh.err
	}
	err := forEachMaster(ctx, c.client, probe)
	if err != nil {
		c.reloadSlots(nil) // a Cluster master may be failing over
	}

	h := &c.health
	h.mu.Lock()
	switched := false
	for addr, nh := range found {
		old := h.nodes[addr]
		switch {
		case old == nil:
		case nh.runID == "": // not answering: keep what it was
			nh.runID = old.runID
		case old.runID != "" && old.runID != nh.runID:
			switched = true
		}
	}
	if len(found) == 0 && err != nil {
		// No master was reached (the topology could not be read): every
		// master known is down, none forgotten.
		for addr, old := range h.nodes {
			found[addr] = &nodeHealth{err: err, runID: old.runID}
		}
	}
	var gone []string
	for addr := range h.nodes {
		if found[addr] == nil {
			gone = append(gone, addr)
		}
	}
	h.nodes = found
	was := h.err
	h.err = err
	h.mu.Unlock()
	for _, addr := range gone {
		c.forgetNode(addr)
	}
	for addr, nh := range found {
		if nh.err == nil {
			c.nodeAnswered(addr)
		}
	}
	up := err == nil
	first := was == errNotProbed
	notify := first || up != (was == nil)

	// A master that answers again after a failed probe may have restarted
	// between two probes without a new run_id seen: set the users up too.
	if (switched || (up && was != nil && !first)) && c.acl != nil {
		c.acl.kick(time.Now())
	}
	if notify {
		if up && !first {
			c.log.Info("redis answers again")
		} else if !up {
			c.log.Warn("redis probe failed; decisions that need it follow their rule's on_error", "err", err)
		}
		if c.onAvailability != nil {
			c.onAvailability(up)
		}
	}
}

// probeNode asks one master for INFO server (and on a Cluster for its
// cluster_state) and returns its run_id, or why it does not serve.
func (c *Capability) probeNode(ctx, parent context.Context, node *redis.Client, cluster bool) (string, error) {
	sent := time.Now()
	info := node.InfoMap(ctx, "server")
	if err := info.Err(); err != nil && redis.HasErrorPrefix(err, "BUSY") {
		// The watchdog: stop the script, then look again.
		busy := time.Now()
		wctx, cancel := context.WithTimeout(parent, 4*c.timeout)
		c.stopScript(wctx, node, busy)
		cancel()
		rctx, cancel := context.WithTimeout(parent, c.timeout)
		sent = time.Now()
		info = node.InfoMap(rctx, "server")
		cancel()
	}
	addr := nodeName(node)
	if err := info.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", addr, c.probeErr(parent, node, err))
	}
	// The node answered a command sent at sent: the script of a call given
	// up on well before then is not running there. Well before: commands
	// that reach Redis close together may run in any order, and on a
	// loaded machine Redis can leave one waiting for a while; the
	// capability's time-out is the margin.
	c.running.answered(nodeName(node), sent.Add(-c.timeout))
	runID := info.Item("Server", "run_id")
	if cluster {
		// A master that lost its quorum, or that serves a Cluster missing
		// slots with cluster-require-full-coverage yes, answers every
		// call CLUSTERDOWN.
		ci, err := node.ClusterInfo(ctx).Result()
		if err != nil {
			return runID, fmt.Errorf("%s: %w", addr, classify("", "probe", err))
		}
		if !strings.Contains(ci, "cluster_state:ok") {
			return runID, fmt.Errorf("%s: %w", addr, &Error{Class: ClassConnection, Script: "probe", Err: errors.New("cluster_state is not ok: the node answers CLUSTERDOWN")})
		}
	}
	return runID, nil
}

// probeErr classifies a failed probe of node. A probe that ran out of
// time may have spent it retrying a connection that was refused (go-redis
// retries, and then reports only the context's deadline): one dial of the
// node tells a refused or unreachable node from one that accepts
// connections and does not answer.
func (c *Capability) probeErr(parent context.Context, node *redis.Client, err error) error {
	e := classify("", "probe", err)
	if ClassOf(e) != ClassTimeout || parent.Err() != nil {
		return e
	}
	o := node.Options()
	if o.Dialer == nil {
		return e
	}
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	conn, derr := o.Dialer(ctx, o.Network, o.Addr)
	if derr != nil {
		if ctx.Err() != nil { // the dial timed out too: the node does not answer
			return &Error{Class: ClassTimeout, Script: "probe", Err: fmt.Errorf("no answer within %v (%w); connecting: %v", c.timeout, err, derr)}
		}
		return classify("", "probe", derr)
	}
	_ = conn.Close()
	return &Error{Class: ClassTimeout, Script: "probe", Err: fmt.Errorf("connected, but no answer within %v: %w", c.timeout, err)}
}

// nodeName returns the name of a master in health, metrics and breakers:
// its address, or for a Sentinel-managed master (whose client has no
// address of its own) "sentinel-master".
func nodeName(node *redis.Client) string {
	if addr := node.Options().Addr; addr != "FailoverClient" && addr != "" {
		return addr
	}
	return "sentinel-master"
}

// Nodes returns what the last probe found of each master, by address.
func (c *Capability) Nodes() []NodeHealth {
	c.health.mu.Lock()
	out := make([]NodeHealth, 0, len(c.health.nodes))
	for addr, nh := range c.health.nodes {
		n := NodeHealth{Node: addr, Up: nh.err == nil, ProbeMS: float64(nh.took.Microseconds()) / 1000}
		if nh.err != nil {
			n.Error = nh.err.Error()
		}
		out = append(out, n)
	}
	c.health.mu.Unlock()
	for i := range out {
		if b := c.breakerOf(out[i].Node); b != nil {
			out[i].CircuitOpen = b.open()
		}
	}
	slices.SortFunc(out, func(a, b NodeHealth) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// ReadyErr returns nil when some decisions can be made normally: the last
// probe found a master answering whose calls have not found it unavailable
// (time-outs, connection failures, an open circuit) for longer than the
// breaker's cooldown with none answered since (the last such call in the
// last second), and with isolation on the plugin users are set up on it.
// Else it says why not. On a Cluster, one master's outage leaves the
// instance ready: the others decide normally.
func (c *Capability) ReadyErr() error {
	c.health.mu.Lock()
	var up []string
	for addr, nh := range c.health.nodes {
		if nh.err == nil {
			up = append(up, addr)
		}
	}
	err := c.health.err
	c.health.mu.Unlock()
	if len(up) == 0 {
		if err == nil {
			err = errNotProbed
		}
		return err
	}
	now, window := time.Now(), c.breakerWindow()
	var outageErr error
	up = slices.DeleteFunc(up, func(addr string) bool {
		b := c.breakerOf(addr)
		if b == nil {
			return false
		}
		err := b.outage.err(now, window)
		if err != nil && outageErr == nil {
			outageErr = err
		}
		return err != nil
	})
	if len(up) == 0 {
		return outageErr
	}
	if c.acl == nil {
		return nil
	}
	for _, addr := range up {
		if c.acl.isolatedOn(addr) {
			return nil
		}
	}
	return c.IsolationErr()
}

// breakerWindow is the breakers' cooldown: how long calls may find Redis
// unavailable before the instance stops being ready.
func (c *Capability) breakerWindow() time.Duration {
	if c.breakerCooldown > 0 {
		return c.breakerCooldown
	}
	return DefaultBreakerCooldown
}

// RedisErr returns nil when the last probe found every master answering,
// else what it found (Probe must run; before its first probe ends, an
// error). A master busy with a long script answers BUSY: class busy.
func (c *Capability) RedisErr() error {
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	return c.health.err
}
