package host

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultHeartbeat is how often a ruled instance registers itself in Redis.
const DefaultHeartbeat = time.Second

// heartbeatScript registers one instance in a sorted set scored by Redis
// time in milliseconds, drops the instances not seen for ARGV[2] ms, and
// returns how many are live.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - ttl)
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return redis.call('ZCARD', KEYS[1])
`)

// membersKey is the sorted set of live instances.
func (e *Engine) membersKey() string { return e.cap.Prefix() + ":instances" }

// Run does the engine's background work until ctx ends: the heartbeat
// that registers this instance (id must be unique among the instances
// sharing the Redis) every interval, default DefaultHeartbeat, and keeps
// the count of live instances that on_error: local divides limits by; and
// the return of idle rule leases' permits (returnIdleRuleLeases). An
// instance counts as live for three intervals after its last heartbeat;
// while Redis is unreachable the last count stays in force. Run
// deregisters the instance and returns when ctx ends.
func (e *Engine) Run(ctx context.Context, id string, interval time.Duration) {
	var wg sync.WaitGroup
	wg.Go(func() { e.returnIdleRuleLeases(ctx) })
	e.heartbeat(ctx, id, interval)
	wg.Wait()
}

// heartbeat is Run's heartbeat.
func (e *Engine) heartbeat(ctx context.Context, id string, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultHeartbeat
	}
	ttl := 3 * interval
	beat := func() {
		cctx, cancel := context.WithTimeout(ctx, max(e.cap.Timeout(), interval/2))
		defer cancel()
		n, err := heartbeatScript.Run(cctx, e.cap.Client(), []string{e.membersKey()}, id, ttl.Milliseconds()).Int64()
		if err != nil {
			return
		}
		if old := e.clusterSize.Swap(max(n, 1)); old != n {
			e.log.Info("ruled instances", "live", n)
		}
	}
	beat()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			cctx, cancel := context.WithTimeout(context.Background(), e.cap.Timeout())
			_ = e.cap.Client().ZRem(cctx, e.membersKey(), id).Err()
			cancel()
			return
		case <-t.C:
			beat()
		}
	}
}
