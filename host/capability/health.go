package capability

import (
	"context"
	"errors"
	"fmt"
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
	mu     sync.Mutex
	err    error             // nil while every master answered; errNotProbed before the first probe
	runIDs map[string]string // master address → run_id, to see restarts and switches
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

// probeOnce runs one probe of every master.
func (c *Capability) probeOnce(parent context.Context) {
	ctx, cancel := context.WithTimeout(parent, c.timeout)
	defer cancel()
	var mu sync.Mutex
	ids := map[string]string{}
	probe := func(ctx context.Context, node *redis.Client) error {
		info := node.InfoMap(ctx, "server")
		if err := info.Err(); err != nil && redis.HasErrorPrefix(err, "BUSY") {
			// The watchdog: stop the script, then look again.
			busy := time.Now()
			wctx, cancel := context.WithTimeout(parent, 4*c.timeout)
			c.stopScript(wctx, node, busy)
			cancel()
			rctx, cancel := context.WithTimeout(parent, c.timeout)
			info = node.InfoMap(rctx, "server")
			cancel()
		}
		if err := info.Err(); err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, classify("", "probe", err))
		}
		mu.Lock()
		ids[node.Options().Addr] = info.Item("Server", "run_id")
		mu.Unlock()
		return nil
	}
	err := forEachMaster(ctx, c.client, probe)
	if err != nil {
		c.reloadSlots(nil) // a Cluster master may be failing over
	}

	h := &c.health
	h.mu.Lock()
	switched := false
	for addr, id := range ids {
		if old, ok := h.runIDs[addr]; ok && old != id {
			switched = true
		}
		h.runIDs[addr] = id
	}
	was := h.err
	h.err = err
	h.mu.Unlock()
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

// RedisErr returns nil when the last probe found every master answering,
// else what it found (Probe must run; before its first probe ends, an
// error). A master busy with a long script answers BUSY: class busy.
func (c *Capability) RedisErr() error {
	c.health.mu.Lock()
	defer c.health.mu.Unlock()
	return c.health.err
}
