package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// TestFaultClusterFailoverOntoRestartedNode: on a 3-master Cluster, the
// replica of one master restarted (so it has lost the plugin users), then
// that master dies and the replica takes over. The subjects it serves
// follow on_error during the failover and are decided normally again, as
// the plugin's own ACL user on the promoted node, within 3 s of the
// promotion; subjects on the other masters decide normally.
func TestFaultClusterFailoverOntoRestartedNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 1)
	d := startDaemon(t, "--redis", cl.URL())
	master := cl.MasterForKey("{203.0.113.1}")
	var on, off []string // subjects served by master, and by another one
	for i := 0; len(on) < 150 || len(off) < 20; i++ {
		ip := fmt.Sprintf("198.51.%d.%d", 100+i/250, i%250)
		if cl.MasterForKey("{"+ip+"}") == master {
			on = append(on, ip)
		} else if len(off) < 20 {
			off = append(off, ip)
		}
	}
	d.checkLimits(on[0])
	replicas := cl.ReplicasOf(master)
	if len(replicas) != 1 {
		t.Fatalf("%d replicas of %s, want 1", len(replicas), master.Addr())
	}
	replica := replicas[0]
	replica.Restart()
	cl.WaitHealthy(10 * time.Second)
	// The restart took the users; take them again in case the periodic
	// pass (every 5 s) put them back meanwhile: the worst case.
	user := capability.ACLUser("fixedwindow")
	if err := replica.Client().Do(context.Background(), "ACL", "DELUSER", user).Err(); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	master.Kill()
	promoted := make(chan time.Duration, 1)
	go func() { // when Redis itself finished the failover
		for time.Since(killed) < 30*time.Second {
			role, err := replica.Client().Do(context.Background(), "ROLE").Slice()
			if err == nil && len(role) > 0 && role[0] == "master" {
				promoted <- time.Since(killed)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(promoted)
	}()
	bound := 2*redistest.ClusterNodeTimeout + 5*time.Second
	took := d.recoverAfterOn(killed, bound, func(i int) string { return on[1+i%(len(on)-1)] }, nil)
	byRedis, ok := <-promoted
	if !ok {
		t.Fatal("the replica was never promoted")
	}
	t.Logf("replica promoted %v after the kill; normal decisions on its slots %v after the kill (%v after the promotion)",
		byRedis.Round(time.Millisecond), took.Round(time.Millisecond), (took - byRedis).Round(time.Millisecond))
	if took-byRedis > 3*time.Second {
		t.Fatalf("decisions normal %v after the promotion, want within 3s", took-byRedis)
	}
	for _, ip := range off[:3] {
		d.checkLimits(ip)
	}
	assertUsers(t, replica.Client())
	d.readyIs(200, 3*time.Second)
}

// TestFaultSentinelFailoverOntoRestartedReplica: behind a Sentinel, the
// replica restarted (so it has lost the plugin users), then the Sentinel
// fails over to it. Decisions follow on_error or stay normal during the
// switch and are normal again, made on the promoted node as the plugin's
// own ACL user, within 3 s of the failover request.
func TestFaultSentinelFailoverOntoRestartedReplica(t *testing.T) {
	sen := redistest.StartSentinel(t, 1)
	d := startDaemon(t, "--redis", sen.URL())
	d.checkLimits("203.0.113.1")
	old := sen.Master()
	assertUsers(t, old.Client())
	var replica *redistest.Server
	for _, n := range sen.Nodes() {
		if n != old {
			replica = n
		}
	}
	replica.Restart()
	sen.WaitInSync(15 * time.Second)
	ctx := context.Background()
	user := capability.ACLUser("fixedwindow")
	if err := replica.Client().Do(ctx, "ACL", "DELUSER", user).Err(); err != nil { // the worst case, as above
		t.Fatal(err)
	}

	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.SentinelAddr()})
	defer sc.Close()
	requested := time.Now()
	if err := sc.Failover(ctx, redistest.SentinelMaster).Err(); err != nil {
		t.Fatal(err)
	}
	// Subjects decided once the replica is master are taken from another
	// range; a normal decision counts only for those, with their keys on
	// the promoted node (written there, not replicated from the old one).
	var promoted time.Duration // when the test first saw the replica as master
	subject := func(i int) string {
		if role, err := replica.Client().Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
			if promoted == 0 {
				promoted = time.Since(requested)
			}
			return fmt.Sprintf("198.51.101.%d", i%250)
		}
		return fmt.Sprintf("198.51.100.%d", i%250)
	}
	onPromoted := func(ip string) bool {
		keys, _, err := replica.Client().Scan(ctx, 0, "ruled:fixedwindow:open:{"+ip+"}:*", 1000).Result()
		return strings.HasPrefix(ip, "198.51.101.") && err == nil && len(keys) > 0
	}
	took := d.recoverAfterOn(requested, 3*time.Second, subject, onPromoted)
	t.Logf("replica promoted %v after SENTINEL FAILOVER; normal decisions on it %v after (%v after the promotion)",
		promoted.Round(time.Millisecond), took.Round(time.Millisecond), (took - promoted).Round(time.Millisecond))
	if got := sen.Master(); got != replica {
		t.Fatalf("the Sentinel reports %s as master, want the promoted %s", got.Addr(), replica.Addr())
	}
	d.checkLimits("203.0.113.2")
	assertUsers(t, replica.Client())
	d.readyIs(200, 3*time.Second)
}
