package capability_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// nodesUp returns the masters of c's last probe, each with "+" when up
// and "-" when not.
func nodesUp(c *capability.Capability) []string {
	var out []string
	for _, n := range c.Nodes() {
		mark := "-"
		if n.Up {
			mark = "+"
		}
		out = append(out, mark+n.Node)
	}
	return out
}

// TestProbeFollowsTheMasters: on a Cluster the probe reports each master
// on its own. A stopped master is down while the others are up (some
// decisions can be made: ServingErr is nil, RedisErr is not); a killed
// master whose replica took over leaves Nodes, and every master is up
// again without anyone acting.
func TestProbeFollowsTheMasters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true,
		ReadTimeout: 250 * time.Millisecond, WriteTimeout: 250 * time.Millisecond, ClusterStateReloadInterval: time.Second,
		DisableRoutingPolicies: true})
	t.Cleanup(func() { _ = cc.Close() })
	c := capability.New(cc, capability.Options{})
	inBackground(t, func(ctx context.Context) { c.Probe(ctx, 100*time.Millisecond) })
	masters := cl.Masters()
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, "+"+m.Addr())
	}
	slices.Sort(addrs)
	waitUntil(t, 2*time.Second, "three masters up", func() bool { return slices.Equal(nodesUp(c), addrs) })

	stopped := masters[0]
	stopped.Pause()
	waitUntil(t, 2*time.Second, "the stopped master down, the others up", func() bool {
		got := nodesUp(c)
		return slices.Contains(got, "-"+stopped.Addr()) && len(got) == 3 &&
			slices.Contains(got, "+"+masters[1].Addr()) && slices.Contains(got, "+"+masters[2].Addr())
	})
	if err := c.ReadyErr(); err != nil {
		t.Errorf("ReadyErr with two of three masters up: %v", err)
	}
	if err := c.RedisErr(); err == nil {
		t.Error("RedisErr is nil with a master stopped")
	}
	stopped.Resume()
	waitUntil(t, 2*time.Second, "three masters up again", func() bool { return slices.Equal(nodesUp(c), addrs) })

	killed := masters[1]
	killed.Kill()
	start := time.Now()
	waitUntil(t, 2*redistest.ClusterNodeTimeout+8*time.Second, "the replica in the killed master's place, every master up", func() bool {
		got := nodesUp(c)
		return len(got) == 3 && !slices.Contains(got, "+"+killed.Addr()) && !slices.Contains(got, "-"+killed.Addr()) &&
			!slices.ContainsFunc(got, func(s string) bool { return s[0] == '-' }) && c.RedisErr() == nil
	})
	t.Logf("the killed master left the probe's view %v after the kill: %v", time.Since(start).Round(time.Millisecond), nodesUp(c))
}

// TestProbeClosesTheCircuit: a master whose circuit opened has it closed
// by the probe that finds it answering, before any call tries it.
func TestProbeClosesTheCircuit(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{Timeout: 50 * time.Millisecond, BreakerCooldown: time.Hour})
	p, err := c.Register("p", []sdk.Script{echoKeys})
	if err != nil {
		t.Fatal(err)
	}
	inBackground(t, func(ctx context.Context) { c.Probe(ctx, 100*time.Millisecond) })
	srv.Pause()
	for i := 0; c.Available(); i++ {
		_, err := p.Host("r", fmt.Sprint(i)).Eval(context.Background(), "keys", []string{"k"})
		if err == nil || i > 20 {
			t.Fatalf("call %d on a stopped Redis: %v; circuit still closed", i, err)
		}
	}
	if n := c.Nodes(); len(n) != 1 || n[0].Node != srv.Addr() {
		t.Fatalf("nodes %+v, want %s", n, srv.Addr())
	}
	waitUntil(t, time.Second, "the node reported with its circuit open", func() bool { return c.Nodes()[0].CircuitOpen })
	srv.Resume()
	// The cooldown is an hour: only the probe can close it.
	waitUntil(t, time.Second, "the probe to close the circuit", c.Available)
	if _, err := p.Host("r", "after").Eval(context.Background(), "keys", []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if n := c.Nodes()[0]; !n.Up || n.CircuitOpen || errors.Is(c.RedisErr(), capability.ErrCircuitOpen) {
		t.Fatalf("node %+v after the resume", n)
	}
}
