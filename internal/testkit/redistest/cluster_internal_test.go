package redistest

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"
)

// A node that stalls right after it is told to MEET a peer (a busy machine
// stops a process for a second) still joins: the handshake outlives the
// stall. With ClusterNodeTimeout as the node timeout during formation the
// stalled node forgets the peer and this test fails.
func TestJoinSurvivesAStalledNode(t *testing.T) {
	dir := t.TempDir()
	var nodes []*Server
	for range 3 {
		nodes = append(nodes, startClusterNode(t, dir, joinNodeTimeout))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	first := nodes[0]
	bus := first.args[slices.Index(first.args, "--cluster-port")+1]
	meet := func(s *Server) {
		t.Helper()
		n := nodeClient(s)
		defer n.Close()
		if err := n.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(first.Port), bus).Err(); err != nil {
			t.Fatal(err)
		}
	}
	meet(nodes[1])
	nodes[1].Pause()
	meet(nodes[2])
	time.Sleep(2 * ClusterNodeTimeout)
	nodes[1].Resume()

	for {
		known := make([]string, len(nodes))
		all := true
		for i, s := range nodes {
			n := nodeClient(s)
			info, err := n.ClusterInfo(ctx).Result()
			_ = n.Close()
			known[i] = field(info, "cluster_known_nodes")
			all = all && err == nil && known[i] == "3"
		}
		if all {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("nodes still know %v of 3 nodes after %v", known, clusterStartTimeout)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
