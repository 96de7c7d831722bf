// Package rolling is the rolling-window counter: at most limit hits in any
// window, the window split into buckets aligned to Redis time that expire
// one by one, so the limit stays smooth across window edges.
//
// limit 0 blocks the subject: every request for hits is denied, with
// retry_after and reset the time until a hit counted now would leave the
// window (the current bucket's start plus window); a peek is denied the
// same way, as in an exhausted window (limit and remaining 0), and a refund
// gives back what was counted before the block as usual. The script decides a block of hits >= 0 from Redis time
// alone, without reading or writing the subject's keys.
package rolling

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

//go:embed script.lua
var script string

// Name is the plugin's name in rule files.
const Name = "rolling"

// DefaultBuckets is the number of buckets when the config does not say.
const DefaultBuckets = 10

// MaxBuckets bounds buckets. A grant costs the same whatever the number of
// buckets, but a denial's retry_after and a refund may walk every bucket of
// the window, and a reload with another layout rewrites them all.
const MaxBuckets = 1000

// MaxLimit bounds limit so that every count stays an exact integer in Lua
// (whose numbers are doubles).
const MaxLimit = 1 << 50

// MaxWindow bounds window so that every time value the script computes
// stays an exact integer in Lua.
const MaxWindow = 10 * 365 * 24 * time.Hour

// Config is the parsed rule config.
type Config struct {
	Limit   int64         // hits allowed in any window, 0 to MaxLimit; 0 blocks the subject
	Window  time.Duration // window length, 1ms to MaxWindow, a whole number of microseconds
	Buckets int64         // buckets per window, 1 to MaxBuckets; window must split into whole microseconds
}

// BucketUS returns the length of one bucket in microseconds.
func (c Config) BucketUS() int64 { return c.Window.Microseconds() / c.Buckets }

// Plugin is the rolling-window algorithm. The zero value is ready to use.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "1.0.0", Scripts: []sdk.Script{{
		Name:     "decide",
		Source:   script,
		Commands: []string{"HGETALL", "HMGET", "HGET", "HINCRBY", "HSET", "HDEL", "DEL", "PEXPIRE"},
		Returns:  sdk.DecisionShape,
	}},
		Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Limit:   r.RequireInt("limit"),
		Window:  r.RequireDuration("window"),
		Buckets: r.Int("buckets", DefaultBuckets),
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	r.Check(c.Limit >= 0 && c.Limit <= MaxLimit, "limit", "must be between 0 (0 blocks the subject) and %d, got %d", int64(MaxLimit), c.Limit)
	r.Check(c.Window >= time.Millisecond && c.Window <= MaxWindow, "window", "must be between 1ms and %s, got %s", MaxWindow, c.Window)
	r.Check(c.Window%time.Microsecond == 0, "window", "must be a whole number of microseconds, got %s", c.Window)
	r.Check(c.Buckets >= 1 && c.Buckets <= MaxBuckets, "buckets", "must be between 1 and %d, got %d", MaxBuckets, c.Buckets)
	if c.Buckets >= 1 && c.Window > 0 && c.Window.Microseconds()%c.Buckets != 0 {
		r.Fail("buckets", "window %s does not split into %d buckets of whole microseconds", c.Window, c.Buckets)
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// decideKeys are the decide script's keys, shared by every call.
var decideKeys = []string{"c", "d0", "d1"}

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// Decide implements sdk.Algorithm.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, req)
}

// Start implements sdk.Stepper: one script call, whose reply is the decision.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("rolling: config of type %T", cfg)
	}
	return windowStep(c, req.Hits, req.DedupID, sdk.FieldBestEffort.Of(req)), nil
}

// Template implements sdk.Templater: the step is the same for every
// request but for its hits, dedup id and best effort.
func (Plugin) Template(cfg sdk.Config) (sdk.Step, bool) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, false
	}
	return windowStep(c, sdk.FieldHits, sdk.FieldDedupID, sdk.FieldBestEffort), true
}

// windowStep is a decision's one step, with the request's hits, dedup id
// and best effort (0 or 1) as given: values in Start, fields in Template.
func windowStep(c Config, hits, dedupID, best any) sdk.Step {
	return sdk.Run("decide", decideKeys, c.Limit, c.Window.Microseconds(), c.BucketUS(), hits, dedupID, best).
		ThenDecide(c.Window)
}

var _ sdk.Templater = Plugin{}
