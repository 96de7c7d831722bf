package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes StartCluster
// returns: short, so that a replica takes over from a killed master within
// a few seconds.
const ClusterNodeTimeout = time.Second

// joinNodeTimeout is the cluster-node-timeout while the cluster forms. A
// node forgets a peer it was told to MEET when the handshake takes longer
// than its node timeout, and nothing meets it again: with ClusterNodeTimeout
// a node stalled for a second on a busy machine would stay out of the
// cluster for good. So nodes start patient, for the whole formation budget,
// and get ClusterNodeTimeout once every node knows every other.
const joinNodeTimeout = clusterStartTimeout

// clusterStartTimeout bounds how long a new cluster may take to agree that
// every slot is served.
const clusterStartTimeout = 30 * time.Second

// Cluster is a Redis Cluster of redis-server processes on 127.0.0.1.
type Cluster struct {
	tb    testing.TB
	nodes []*Server
}

// StartCluster starts masters×(1+replicasPerMaster) cluster-enabled
// redis-servers on free loopback ports, joins them into one cluster with
// redis-cli --cluster create, and returns once every node reports
// cluster_state:ok, all 16384 slots are served and every replica is in sync
// with its master. Every process is stopped at cleanup. The test fails when
// redis-server or redis-cli is not on PATH, or when the cluster does not
// form within 30 s. masters must be at least 3.
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		tb.Fatalf("redistest: a cluster needs at least 3 masters and no negative replicas, got %d and %d", masters, replicasPerMaster)
	}
	cli := lookPath(tb, "redis-cli")
	dir := tb.TempDir()
	c := &Cluster{tb: tb}
	for range masters * (1 + replicasPerMaster) {
		c.nodes = append(c.nodes, startClusterNode(tb, dir, joinNodeTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("redistest: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.wait(ctx); err != nil {
		tb.Fatalf("redistest: the cluster did not form within %v: %v\nredis-cli said:\n%s", clusterStartTimeout, err, out)
	}
	for _, n := range c.nodes {
		if err := n.setNodeTimeout(ctx, ClusterNodeTimeout); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
	}
	return c
}

// startClusterNode starts one cluster-enabled redis-server with the given
// cluster-node-timeout, its cluster bus on a free port of its own.
func startClusterNode(tb testing.TB, dir string, nodeTimeout time.Duration) *Server {
	tb.Helper()
	return startOn(tb, dir, func(port int) ([]string, error) {
		bus, err := freePort()
		for err == nil && bus == port {
			bus, err = freePort()
		}
		if err != nil {
			return nil, err
		}
		return []string{
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, fmt.Sprintf("nodes-%d.conf", port)),
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-announce-ip", "127.0.0.1",
			// Replicas sync at once instead of after the default 5 s.
			"--repl-diskless-sync-delay", "0",
		}, nil
	})
}

// setNodeTimeout sets a cluster node's cluster-node-timeout, now and for
// every Restart; StartCluster calls it before any test holds the node.
func (s *Server) setNodeTimeout(ctx context.Context, d time.Duration) error {
	ms := strconv.FormatInt(d.Milliseconds(), 10)
	n := nodeClient(s)
	defer n.Close()
	if err := n.ConfigSet(ctx, "cluster-node-timeout", ms).Err(); err != nil {
		return fmt.Errorf("setting cluster-node-timeout on %s: %w", s.Addr(), err)
	}
	s.args = slices.Clone(s.args)
	if i := slices.Index(s.args, "--cluster-node-timeout"); i >= 0 && i+1 < len(s.args) {
		s.args[i+1] = ms
	}
	return nil
}

// Nodes returns every node, masters and replicas, in the order they were
// started, killed ones included.
func (c *Cluster) Nodes() []*Server { return slices.Clone(c.nodes) }

// Addrs returns every node's host:port, the seed list for a cluster client.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL returns the cluster's redis+cluster:// URL listing every node.
func (c *Cluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs(), ",") }

// Client returns a new go-redis cluster client seeded with every node,
// closed at cleanup. Like ruled's, it reloads the slot map when it is more
// than a second old, so it finds a promoted replica soon after a failover.
func (c *Cluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: time.Second})
	c.tb.Cleanup(func() { _ = cc.Close() })
	return cc
}

// Masters returns the live masters that serve slots, ordered by their
// first slot, as a live node currently sees the cluster.
func (c *Cluster) Masters() []*Server {
	c.tb.Helper()
	var out []*Server
	for _, r := range c.slots() {
		if s := c.node(r.master); s != nil && s.alive() && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// MasterForKey returns the master that serves key's slot (hash tags
// honoured), as a live node currently sees the cluster.
func (c *Cluster) MasterForKey(key string) *Server {
	c.tb.Helper()
	slot := c.KeySlot(key)
	for _, r := range c.slots() {
		if r.start <= slot && slot <= r.end {
			if s := c.node(r.master); s != nil {
				return s
			}
			c.tb.Fatalf("redistest: slot %d is served by %s, not a node of this cluster", slot, r.master)
		}
	}
	c.tb.Fatalf("redistest: no node serves slot %d of key %q", slot, key)
	return nil
}

// KeySlot returns key's slot, as CLUSTER KEYSLOT computes it.
func (c *Cluster) KeySlot(key string) int64 {
	c.tb.Helper()
	var slot int64
	c.onLiveNode(func(ctx context.Context, n *redis.Client) (err error) {
		slot, err = n.ClusterKeySlot(ctx, key).Result()
		return err
	})
	return slot
}

// KillMasterForKey kills (SIGKILL) the master that serves key's slot and
// returns it. Its replica, if it has one, takes over after about twice
// ClusterNodeTimeout.
func (c *Cluster) KillMasterForKey(key string) *Server {
	c.tb.Helper()
	s := c.MasterForKey(key)
	s.Kill()
	return s
}

// ReplicasOf returns the live replicas of master, as its CLUSTER SHARDS
// entry lists them.
func (c *Cluster) ReplicasOf(master *Server) []*Server {
	c.tb.Helper()
	var shards []redis.ClusterShard
	c.onLiveNode(func(ctx context.Context, n *redis.Client) (err error) {
		shards, err = n.ClusterShards(ctx).Result()
		return err
	})
	for _, sh := range shards {
		var replicas []*Server
		owns := false
		for _, n := range sh.Nodes {
			s := c.node(net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
			switch {
			case s == master && n.Role == "master":
				owns = true
			case s != nil && n.Role == "replica" && s.alive():
				replicas = append(replicas, s)
			}
		}
		if owns {
			return replicas
		}
	}
	return nil
}

// WaitHealthy waits until every live node reports cluster_state:ok with all
// 16384 slots served and every live replica is in sync with its master, as
// after a failover completed, and fails the test after timeout.
func (c *Cluster) WaitHealthy(timeout time.Duration) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.wait(ctx); err != nil {
		c.tb.Fatalf("redistest: the cluster was not healthy within %v: %v", timeout, err)
	}
}

// wait polls until healthy() reports nil or ctx ends, and returns the last
// reason the cluster was not healthy.
func (c *Cluster) wait(ctx context.Context) error {
	for {
		err := c.healthy(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// healthy returns nil when every live node sees a healthy cluster that
// knows every node, and otherwise why not.
func (c *Cluster) healthy(ctx context.Context) error {
	for _, s := range c.nodes {
		if !s.alive() {
			continue
		}
		n := nodeClient(s)
		info, err := n.ClusterInfo(ctx).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok\r\n") {
			err = fmt.Errorf("cluster_state:%s", field(info, "cluster_state"))
		}
		if err == nil && (field(info, "cluster_slots_ok") != "16384" || field(info, "cluster_known_nodes") != strconv.Itoa(len(c.nodes))) {
			err = fmt.Errorf("slots ok %s, known nodes %s of %d", field(info, "cluster_slots_ok"), field(info, "cluster_known_nodes"), len(c.nodes))
		}
		var repl string
		if err == nil {
			repl, err = n.Info(ctx, "replication").Result()
		}
		if err == nil && field(repl, "role") == "slave" && field(repl, "master_link_status") != "up" {
			err = fmt.Errorf("replica of %s:%s not in sync yet", field(repl, "master_host"), field(repl, "master_port"))
		}
		_ = n.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", s.Addr(), err)
		}
	}
	return nil
}

// field returns the value of "name:value" in the output of INFO or
// CLUSTER INFO.
func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// slotRange is a range of slots and the address of the master serving it.
type slotRange struct {
	start, end int64
	master     string
}

// slots returns the slot ranges as a live node sees them (CLUSTER SHARDS),
// ordered by first slot.
func (c *Cluster) slots() []slotRange {
	c.tb.Helper()
	var shards []redis.ClusterShard
	c.onLiveNode(func(ctx context.Context, n *redis.Client) (err error) {
		shards, err = n.ClusterShards(ctx).Result()
		return err
	})
	var out []slotRange
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			if n.Role != "master" {
				continue
			}
			for _, r := range sh.Slots {
				out = append(out, slotRange{r.Start, r.End, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))})
			}
		}
	}
	slices.SortFunc(out, func(a, b slotRange) int { return int(a.start - b.start) })
	return out
}

// onLiveNode runs f with a client of the first live node that answers, and
// fails the test when none does.
func (c *Cluster) onLiveNode(f func(context.Context, *redis.Client) error) {
	c.tb.Helper()
	var errs []string
	for _, s := range c.nodes {
		if !s.alive() {
			continue
		}
		n := nodeClient(s)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := f(ctx, n)
		cancel()
		_ = n.Close()
		if err == nil {
			return
		}
		errs = append(errs, s.Addr()+": "+err.Error())
	}
	c.tb.Fatalf("redistest: no live cluster node answered: %s", strings.Join(errs, "; "))
}

// node returns the node listening on addr, or nil.
func (c *Cluster) node(addr string) *Server {
	for _, s := range c.nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// nodeClient returns a single-connection client for one node, for
// administration; the caller closes it.
func nodeClient(s *Server) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.password, PoolSize: 1, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
}
