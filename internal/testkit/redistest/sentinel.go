package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the name the Sentinel of StartSentinel monitors.
const SentinelMaster = "ruledtest"

// SentinelDownAfter is how long the Sentinel waits before it considers an
// unanswering master down: short, so that failovers take about a second.
const SentinelDownAfter = time.Second

// Sentinel is a master, its replicas and one Sentinel (quorum 1) watching
// them, all redis-server processes on 127.0.0.1.
type Sentinel struct {
	tb       testing.TB
	nodes    []*Server // the master StartSentinel started, then the replicas
	sentinel *Server
}

// StartSentinel starts a master, replicas replicas of it and a Sentinel,
// and returns once the Sentinel knows every replica as in sync. Every
// process is stopped at cleanup.
func StartSentinel(tb testing.TB, replicas int) *Sentinel {
	tb.Helper()
	master := Start(tb, "--repl-diskless-sync-delay", "0")
	s := &Sentinel{tb: tb, nodes: []*Server{master}}
	for range replicas {
		s.nodes = append(s.nodes, Start(tb, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port),
			"--repl-diskless-sync-delay", "0"))
	}
	dir := tb.TempDir()
	s.sentinel = startOn(tb, dir, func(port int) ([]string, error) {
		conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
		text := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %[1]s %d\n"+
			"sentinel failover-timeout %[1]s 5000\nsentinel parallel-syncs %[1]s %d\n",
			SentinelMaster, master.Port, SentinelDownAfter.Milliseconds(), max(replicas, 1))
		return []string{conf, "--sentinel"}, os.WriteFile(conf, []byte(text), 0o600)
	})
	s.WaitInSync(30 * time.Second)
	return s
}

// URL returns the redis+sentinel:// URL of the monitored master.
func (s *Sentinel) URL() string {
	return "redis+sentinel://" + s.SentinelAddr() + "/" + SentinelMaster
}

// SentinelAddr returns the Sentinel's host:port.
func (s *Sentinel) SentinelAddr() string { return s.sentinel.Addr() }

// Nodes returns the master StartSentinel started and its replicas, in the
// order they were started, whichever is master now.
func (s *Sentinel) Nodes() []*Server { return slices.Clone(s.nodes) }

// Master returns the node the Sentinel reports as master now.
func (s *Sentinel) Master() *Server {
	s.tb.Helper()
	addr, err := s.masterAddr()
	if err != nil {
		s.tb.Fatalf("redistest: asking the Sentinel for the master: %v", err)
	}
	for _, n := range s.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	s.tb.Fatalf("redistest: the Sentinel reports master %s, not a node of this set", addr)
	return nil
}

func (s *Sentinel) masterAddr() (string, error) {
	c := s.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	hp, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(hp[0], hp[1]), nil
}

// Failover asks the Sentinel to fail over now (SENTINEL FAILOVER) and
// returns the new master once the Sentinel reports it and it has taken the
// master role, failing the test after timeout.
func (s *Sentinel) Failover(timeout time.Duration) *Server {
	s.tb.Helper()
	old := s.Master()
	c := s.client()
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := c.Failover(ctx, SentinelMaster).Err(); err != nil {
		s.tb.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	for {
		if addr, err := s.masterAddr(); err == nil && addr != old.Addr() {
			for _, n := range s.nodes {
				if n.Addr() == addr && role(ctx, n) == "master" {
					return n
				}
			}
		}
		select {
		case <-ctx.Done():
			s.tb.Fatalf("redistest: no new master within %v of SENTINEL FAILOVER", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitInSync waits until the Sentinel lists every node but the master as a
// replica in sync and every such node's link to the master is up, failing
// the test after timeout. After a failover, the Sentinel turns the old
// master into a replica only when it next reads its INFO (every 10 s).
func (s *Sentinel) WaitInSync(timeout time.Duration) {
	s.tb.Helper()
	c := s.client()
	defer c.Close()
	for deadline := time.Now().Add(timeout); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		why := s.inSync(ctx, c)
		cancel()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: Sentinel set not in sync within %v: %s", timeout, why)
		}
	}
}

// inSync returns "" when every replica is known and in sync, else why not.
func (s *Sentinel) inSync(ctx context.Context, c *redis.SentinelClient) string {
	master, err := s.masterAddr()
	if err != nil {
		return err.Error()
	}
	replicas, err := c.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return err.Error()
	}
	ok := 0
	for _, r := range replicas {
		if r["flags"] == "slave" && r["master-link-status"] == "ok" {
			ok++
		}
	}
	if ok != len(s.nodes)-1 {
		return fmt.Sprintf("the Sentinel knows %d replicas in sync of %d", ok, len(s.nodes)-1)
	}
	for _, n := range s.nodes {
		if n.Addr() == master || !n.alive() {
			continue
		}
		nc := nodeClient(n)
		info, err := nc.Info(ctx, "replication").Result()
		_ = nc.Close()
		if err != nil {
			return err.Error()
		}
		if field(info, "master_link_status") != "up" {
			return n.Addr() + ": link to the master not up"
		}
	}
	return ""
}

func (s *Sentinel) client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.sentinel.Addr(), MaxRetries: -1, DialTimeout: time.Second})
}

// role returns what ROLE says the node is ("master", "slave"), or "".
func role(ctx context.Context, n *Server) string {
	c := nodeClient(n)
	defer c.Close()
	r, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(r) == 0 {
		return ""
	}
	s, _ := r[0].(string)
	return s
}
