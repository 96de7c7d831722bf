// Package limiter is a concurrency limiter for ruled: at most limit
// requests in flight per subject, each holding a lease until it is released
// or its ttl runs out.
//
// A client acquires a slot with hits: 1 and a lease id in dedup_id, and
// releases it with hits: -1 and the same id:
//
//   - Acquiring is allowed while fewer than limit leases are held. Acquiring
//     again with an id that holds a lease renews it (its expiry moves to
//     ttl from now) and takes no other slot: a long request can keep its
//     slot alive.
//   - Releasing frees the lease's slot once; releasing it again, or a lease
//     that expired, frees nothing (granted is -1 the first time, then 0).
//   - A lease expires ttl after it was taken or last renewed, so a client
//     that crashed cannot hold a slot for longer.
//   - hits: 0 peeks: allowed while a slot is free.
//
// remaining is the number of free slots, reset the time until every lease
// held now has expired, and retry_after of a denial the time until the
// oldest lease expires (a release may free a slot sooner). Time is Redis
// time, in microseconds, inside the script.
//
// The same algorithm builds as a process plugin (../main.go) and, with
// sdk/guest, as a Wasm module.
package limiter

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

//go:embed script.lua
var script string

// Name is the plugin's name.
const Name = "concurrency"

// Config is the parsed rule config.
type Config struct {
	// Limit is the most leases held at once per subject, at least 1.
	Limit int64
	// TTL is how long a lease lasts unless released or renewed, 1ms to 24h,
	// a whole number of microseconds. Default 30s.
	TTL time.Duration
}

// Limiter is the algorithm. The zero value is ready to use.
type Limiter struct{}

// New returns the algorithm.
func New() sdk.Algorithm { return Limiter{} }

// Info implements sdk.Algorithm.
func (Limiter) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "1.0.0", Scripts: []sdk.Script{{
		Name:     "lease",
		Source:   script,
		Commands: []string{"ZREMRANGEBYSCORE", "ZCARD", "ZSCORE", "ZADD", "ZREM", "ZRANGE", "PEXPIRE"},
	}},
		// A release frees a slot at any moment, so a denial is not firm,
		// and a slot belongs to one lease id, so grants cannot be taken
		// ahead; hits: -1 releases.
		Traits: sdk.Traits{Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Limiter) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{Limit: r.RequireInt("limit"), TTL: r.Duration("ttl", 30*time.Second)}
	if err := r.Done(); err != nil {
		return nil, err
	}
	r.Check(c.Limit >= 1 && c.Limit <= 1_000_000, "limit", "must be 1 to 1000000, got %d", c.Limit)
	r.Check(c.TTL >= time.Millisecond && c.TTL <= 24*time.Hour, "ttl", "must be 1ms to 24h, got %s", c.TTL)
	r.Check(c.TTL%time.Microsecond == 0, "ttl", "must be a whole number of microseconds")
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// checkRequest refuses what the limiter cannot do, as bad input: the client
// gets a 400, not the rule's on_error outcome.
func checkRequest(r *sdk.Request) error {
	if r.Hits < -1 || r.Hits > 1 {
		return sdk.BadRequest("concurrency: hits must be 1 (acquire), -1 (release) or 0 (peek), got %d", r.Hits)
	}
	if r.Hits != 0 && r.DedupID == "" {
		return sdk.BadRequest("concurrency: dedup_id must name the lease to acquire or release")
	}
	return nil
}

// Decide implements sdk.Algorithm.
func (Limiter) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, r sdk.Request) (sdk.Decision, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Decision{}, fmt.Errorf("concurrency: config of type %T", cfg)
	}
	if err := checkRequest(&r); err != nil {
		return sdk.Decision{}, err
	}
	reply, err := h.Eval(ctx, "lease", []string{"leases"}, c.Limit, c.TTL.Microseconds(), r.Hits, r.DedupID)
	if err != nil {
		return sdk.Decision{}, err
	}
	return sdk.DecisionFromReply(reply, c.TTL)
}
