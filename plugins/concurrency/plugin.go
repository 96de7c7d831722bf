// Package concurrency is ruled's in-flight limiter, a distributed
// semaphore: at most limit holders per subject at once, each a lease named
// by its client, released when the request ends or lost after ttl.
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
//   - hits: 0 peeks: allowed while a slot is free for a newcomer.
//   - A request that waits (sdk.Request.Queue: POST /v1/acquire) and is
//     denied takes a place in the subject's line, in order of arrival, and
//     keeps it while it asks again within LineTTL. Free slots go to the
//     line first, in order: an acquire is granted only while fewer waiters
//     are ahead of it than slots are free (a newcomer, or any request that
//     does not wait, is behind every waiter). A release by a waiter's id
//     takes it out of the line.
//
// remaining is the number of free slots, reset the time until every lease
// held now has expired, and retry_after of a denial the time until the
// oldest lease expires (a release may free a slot sooner). Time is Redis
// time, in microseconds, inside the script. A release can free a slot at
// any moment, so a denial is not firm (no deny cache), and a slot belongs
// to one lease id, so grants cannot be leased ahead (docs/plugins.md,
// "concurrency").
//
// The same algorithm runs natively, as a Wasm module (./wasm) and as a
// process plugin (examples/plugins/concurrency).
package concurrency

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

// Plugin is the algorithm. The zero value is ready to use.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the algorithm.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "1.0.0", Scripts: []sdk.Script{{
		Name:     "lease",
		Source:   script,
		Commands: []string{"ZREMRANGEBYSCORE", "ZRANGEBYSCORE", "ZCARD", "ZSCORE", "ZRANK", "ZADD", "ZREM", "ZRANGE", "PEXPIRE"},
		Returns:  sdk.DecisionShape,
	}},
		// A release frees a slot at any moment, so a denial is not firm,
		// and a slot belongs to one lease id, so grants cannot be taken
		// ahead; hits: -1 releases.
		Traits: sdk.Traits{Refunds: true, Releases: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
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

// checkRequest refuses what the plugin cannot do, as bad input: the client
// gets a 400, not the rule's on_error outcome.
func checkRequest(r *sdk.Request) error {
	if r.Hits < -1 || r.Hits > 1 {
		return sdk.BadRequest("concurrency: hits must be 1 (acquire), -1 (release) or 0 (peek), got %d", r.Hits)
	}
	if r.Hits != 0 && r.DedupID == "" {
		return sdk.BadRequest("concurrency: a lease id (the check's lease_id, or its dedup_id) must name the slot to acquire or release")
	}
	return nil
}

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// Decide implements sdk.Algorithm.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, r sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, r)
}

// Start implements sdk.Stepper: one script call, whose reply is the
// decision. It is no sdk.Templater: a request is checked here first.
func (Plugin) Start(_ context.Context, cfg sdk.Config, r sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("concurrency: config of type %T", cfg)
	}
	if err := checkRequest(&r); err != nil {
		return sdk.Step{}, err
	}
	queue := 0
	if r.Queue {
		queue = 1
	}
	return sdk.Run("lease", leaseKeys, c.Limit, c.TTL.Microseconds(), r.Hits, r.DedupID, queue, LineTTL.Microseconds()).ThenDecide(c.TTL), nil
}

// LineTTL is how long a request waiting in line (sdk.Request.Queue) keeps
// its place without asking again: a waiter that went away leaves the line
// by then.
const LineTTL = time.Second

// leaseKeys are the lease script's keys: the subject's leases, its line
// and the line's deadlines.
var leaseKeys = []string{"leases", "line", "waits"}

var _ sdk.Stepper = Plugin{}
