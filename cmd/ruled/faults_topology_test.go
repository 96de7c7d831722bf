package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/redistest"
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
	took := d.recoverAfterOn(killed, bound, func(i int) string { return on[1+i%(len(on)-1)] })
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
