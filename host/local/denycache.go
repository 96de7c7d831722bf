package local

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

const denyShards = 32

// DefaultDenyCacheSize bounds the entries of a DenyCache.
const DefaultDenyCacheSize = 100_000

// DenyCache remembers, per rule and subject, a denial and until when it
// holds, so that later requests are denied in-process without a Redis call.
// Only requests for as many hits as the cached denial are denied from it
// (a larger request would wait longer than its retry-after says); peeks and
// refunds always go to Redis. It is safe for concurrent
// use.
type DenyCache struct {
	seed     maphash.Seed
	perShard int
	shards   [denyShards]denyShard
	hits     atomic.Int64
	// entries counts the entries of every shard, so that Get on an empty
	// cache (no rule has denied yet: the usual case) costs one atomic load
	// instead of a hash, a lock and a map lookup.
	entries atomic.Int64
	now     func() time.Time
}

type denyShard struct {
	mu sync.Mutex
	m  map[Key]denyEntry
}

type denyEntry struct {
	until time.Time
	hits  int64
	d     sdk.Decision
}

// NewDenyCache returns a cache of at most size entries (DefaultDenyCacheSize
// when size <= 0) that tells time by now (time.Now when nil).
func NewDenyCache(size int, now func() time.Time) *DenyCache {
	if size <= 0 {
		size = DefaultDenyCacheSize
	}
	if now == nil {
		now = time.Now
	}
	c := &DenyCache{seed: maphash.MakeSeed(), perShard: max(1, size/denyShards), now: now}
	for i := range c.shards {
		c.shards[i].m = map[Key]denyEntry{}
	}
	return c
}

func (c *DenyCache) shard(key Key) *denyShard {
	return &c.shards[key.Hash(c.seed)%denyShards]
}

// Key identifies a rule and subject in the in-process caches. Being a pair
// rather than one joined string, building it costs no allocation.
type Key struct{ Rule, Subject string }

// Hash returns the key's hash under seed.
func (k Key) Hash(seed maphash.Seed) uint64 { return maphash.Comparable(seed, k) }

// Get returns the cached denial for key if it still holds for a request of
// hits (as many as the denied request asked for), with its times moved to
// now.
func (c *DenyCache) Get(key Key, hits int64) (sdk.Decision, bool) {
	if hits <= 0 || c.entries.Load() == 0 {
		return sdk.Decision{}, false
	}
	s := c.shard(key)
	s.mu.Lock()
	e, ok := s.m[key]
	if !ok {
		s.mu.Unlock()
		return sdk.Decision{}, false
	}
	left := e.until.Sub(c.now())
	if hits != e.hits || left <= 0 {
		// The request goes to the plugin, whose answer replaces the entry
		// (a denial) or makes it stale (a grant): drop it now.
		delete(s.m, key)
		c.entries.Add(-1)
		s.mu.Unlock()
		return sdk.Decision{}, false
	}
	s.mu.Unlock()
	d := e.d
	d.RetryAfter = left
	d.Reset = max(d.Reset-(e.d.RetryAfter-left), left)
	c.hits.Add(1)
	return d, true
}

// Put remembers a denial for a request of hits.
func (c *DenyCache) Put(key Key, hits int64, d sdk.Decision) {
	if d.Allowed || d.RetryAfter <= 0 || hits <= 0 {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	before := len(s.m)
	if len(s.m) >= c.perShard {
		now := c.now()
		for k, e := range s.m {
			if !e.until.After(now) {
				delete(s.m, k)
			}
		}
		if len(s.m) >= c.perShard {
			clear(s.m)
		}
	}
	s.m[key] = denyEntry{until: c.now().Add(d.RetryAfter), hits: hits, d: d}
	c.entries.Add(int64(len(s.m) - before))
}

// Forget drops key's entry, if any (units were given back).
func (c *DenyCache) Forget(key Key) {
	if c.entries.Load() == 0 {
		return
	}
	s := c.shard(key)
	s.mu.Lock()
	if _, ok := s.m[key]; ok {
		delete(s.m, key)
		c.entries.Add(-1)
	}
	s.mu.Unlock()
}

// ForgetRule drops every entry of one rule (its counters were cleared).
func (c *DenyCache) ForgetRule(rule string) {
	if c.entries.Load() == 0 {
		return
	}
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		for k := range s.m {
			if k.Rule == rule {
				delete(s.m, k)
				c.entries.Add(-1)
			}
		}
		s.mu.Unlock()
	}
}

// Clear forgets every entry (the rules changed).
func (c *DenyCache) Clear() {
	for i := range c.shards {
		c.shards[i].mu.Lock()
		c.entries.Add(-int64(len(c.shards[i].m)))
		clear(c.shards[i].m)
		c.shards[i].mu.Unlock()
	}
}

// Hits returns how many requests the cache has denied.
func (c *DenyCache) Hits() int64 { return c.hits.Load() }
