package client

import "time"

// SetLeaseBounds sets how many requests each of the client's lease shards
// remembers and how long an unseen request stays remembered, before its
// first Check.
func SetLeaseBounds(c *Client, perShard int, idle time.Duration) {
	c.leases.perShard, c.leases.entryIdle = perShard, idle
}

// LeaseShards is how many shards the requests are remembered in.
const LeaseShards = leaseShards

// RememberedRequests counts the requests the client's leases remember.
func RememberedRequests(c *Client) int {
	n := 0
	for i := range c.leases.shards {
		s := &c.leases.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
