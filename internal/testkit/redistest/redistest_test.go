package redistest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

func TestPasswordSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "p@ss word")
	ctx := context.Background()
	if err := srv.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("client with the password: %v", err)
	}
	anon := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer anon.Close()
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("PING without the password succeeded")
	}
	opts, err := redis.ParseURL(srv.URL())
	if err != nil || opts.Password != "p@ss word" {
		t.Fatalf("URL %q: password %q, %v", srv.URL(), opts.Password, err)
	}

	srv.Restart() // must come back with the same arguments: password and all
	if err := anon.Ping(ctx).Err(); err == nil {
		t.Fatal("after Restart: PING without the password succeeded")
	}
	c := srv.Client()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if n, err := c.Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Fatalf("after Restart: EXISTS k = %d, %v; want the data gone", n, err)
	}
	srv.Kill()
	once := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "p@ss word", MaxRetries: -1, DialerRetries: 1})
	defer once.Close()
	if err := once.Ping(ctx).Err(); err == nil {
		t.Fatal("PING after Kill succeeded")
	}
}

func TestClusterServesEverySlotAndFailsOver(t *testing.T) {
	start := time.Now()
	c := redistest.StartCluster(t, 3, 1)
	t.Logf("3 masters + 3 replicas up in %v", time.Since(start))
	if n := len(c.Nodes()); n != 6 || len(c.Addrs()) != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	for _, n := range c.Nodes() {
		// Failover within seconds needs the short timeout the nodes got
		// once they had joined.
		got, err := n.Client().ConfigGet(context.Background(), "cluster-node-timeout").Result()
		if want := fmt.Sprint(redistest.ClusterNodeTimeout.Milliseconds()); err != nil || got["cluster-node-timeout"] != want {
			t.Fatalf("%s: cluster-node-timeout %v, %v; want %s", n.Addr(), got, err, want)
		}
	}
	masters := c.Masters()
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}
	ctx := context.Background()
	cc := c.Client()
	seen := map[*redistest.Server]bool{}
	for i := range 30 {
		key := fmt.Sprintf("key-%d", i)
		if err := cc.Set(ctx, key, i, 0).Err(); err != nil {
			t.Fatal(err)
		}
		m := c.MasterForKey(key)
		seen[m] = true
		// The key is on that master and nowhere else among the masters.
		for _, other := range masters {
			n, err := other.Client().Exists(ctx, key).Result()
			if err != nil && other == m {
				t.Fatal(err)
			}
			if (n == 1) != (other == m) {
				t.Fatalf("%s on %s: exists %d (MasterForKey says %s)", key, other.Addr(), n, m.Addr())
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("30 keys landed on %d masters, want all 3", len(seen))
	}
	if a, b := c.KeySlot("x:{tag}:1"), c.KeySlot("y:{tag}:2"); a != b {
		t.Fatalf("hash tag ignored: slots %d and %d", a, b)
	}

	// Replication is asynchronous: a master killed before its replica
	// has key-0 (the replica may still be in its first sync) loses it.
	// Write it once more and wait on the same connection until the
	// replica acknowledges it.
	pipe := c.MasterForKey("key-0").Client().Pipeline()
	pipe.Set(ctx, "key-0", 0, 0)
	acked := pipe.Do(ctx, "WAIT", 1, 15000)
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := acked.Int(); err != nil || n < 1 {
		t.Fatalf("WAIT for key-0's replica: %d, %v; want 1 replica", n, err)
	}
	killed := c.KillMasterForKey("key-0")
	start = time.Now()
	c.WaitHealthy(15 * time.Second)
	t.Logf("replica took over in %v", time.Since(start))
	if m := c.MasterForKey("key-0"); m == killed || len(c.Masters()) != 3 {
		t.Fatalf("after failover: key-0 on %s (killed %s), %d masters", m.Addr(), killed.Addr(), len(c.Masters()))
	}
	if v, err := c.MasterForKey("key-0").Client().Get(ctx, "key-0").Int(); err != nil || v != 0 {
		t.Fatalf("key-0 after failover: %d, %v; want the replicated value", v, err)
	}
}

func TestSentinelFailsOver(t *testing.T) {
	s := redistest.StartSentinel(t, 1)
	ctx := context.Background()
	old := s.Master()
	if err := old.Client().Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := old.Client().Wait(ctx, 1, 2*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	fc := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: redistest.SentinelMaster, SentinelAddrs: []string{s.SentinelAddr()}})
	defer fc.Close()
	if v, err := fc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("through the Sentinel: %q, %v", v, err)
	}
	started := time.Now()
	promoted := s.Failover(10 * time.Second)
	if promoted == old {
		t.Fatal("the same node is master after the failover")
	}
	if v, err := promoted.Client().Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("the promoted replica lacks the data: %q, %v", v, err)
	}
	t.Logf("failover took %v", time.Since(started).Round(time.Millisecond))
	if v, err := fc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("through the Sentinel after the failover: %q, %v", v, err)
	}
	if err := fc.Set(ctx, "k", "w", 0).Err(); err != nil {
		t.Fatalf("writing through the Sentinel after the failover: %v", err)
	}
}
