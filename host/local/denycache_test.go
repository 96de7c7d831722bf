package local

import (
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

func TestDenyCache(t *testing.T) {
	c := NewDenyCache(64, nil)
	now := time.Unix(1000, 0)
	c.now = func() time.Time { return now }
	k := Key{Rule: "rule", Subject: "subject"}
	denial := sdk.Decision{Allowed: false, Limit: 5, RetryAfter: 2 * time.Second, Reset: 10 * time.Second}
	c.Put(k, 3, denial)
	if _, ok := c.Get(k, 2); ok {
		t.Fatal("a smaller request was denied from a denial of 3 hits")
	}
	if _, ok := c.Get(k, 3); ok {
		t.Fatal("the entry outlived a request of other hits sent to the plugin")
	}
	c.Put(k, 3, denial)
	if _, ok := c.Get(k, 4); ok {
		t.Fatal("a larger request was denied with a smaller request's retry-after")
	}
	c.Put(k, 3, denial)
	c.Forget(k)
	if _, ok := c.Get(k, 3); ok {
		t.Fatal("a forgotten denial answered")
	}
	c.Put(k, 3, denial)
	if _, ok := c.Get(k, 0); ok {
		t.Fatal("a peek was answered from the cache")
	}
	now = now.Add(500 * time.Millisecond)
	d, ok := c.Get(k, 3)
	if !ok || d.Allowed || d.RetryAfter != 1500*time.Millisecond || d.Reset != 9500*time.Millisecond || d.Limit != 5 {
		t.Fatalf("cached denial %+v %v", d, ok)
	}
	now = now.Add(1500 * time.Millisecond)
	if _, ok := c.Get(k, 3); ok {
		t.Fatal("denial outlived its retry-after")
	}
	// Rule and subject stay apart: no joined form makes two keys one.
	c.Put(Key{Rule: "a\x00b", Subject: "c"}, 1, sdk.Decision{RetryAfter: time.Hour})
	if _, ok := c.Get(Key{Rule: "a", Subject: "b\x00c"}, 1); ok {
		t.Fatal("a denial of one rule and subject answered another")
	}
	c.Put(k, 1, sdk.Decision{Allowed: true, RetryAfter: time.Second})
	if _, ok := c.Get(k, 1); ok {
		t.Fatal("an allowed decision was cached")
	}
	for i := 0; i < 1000; i++ { // bounded
		c.Put(Key{Rule: "r", Subject: string(rune(i))}, 1, sdk.Decision{RetryAfter: time.Hour})
	}
	total := 0
	for i := range c.shards {
		total += len(c.shards[i].m)
	}
	if total > 64+denyShards {
		t.Fatalf("cache holds %d entries, bound 64", total)
	}
	if n := c.entries.Load(); n != int64(total) {
		t.Fatalf("entry count %d, the shards hold %d", n, total)
	}
	c.Clear()
	if n := c.entries.Load(); n != 0 {
		t.Fatalf("entry count %d after Clear", n)
	}
	if c.Hits() != 1 {
		t.Fatalf("hits %d, want 1", c.Hits())
	}
}
