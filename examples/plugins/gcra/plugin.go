// Package gcra is the generic cell rate algorithm (GCRA) as a third-party
// ruled plugin, with the semantics of redis-cell's CL.THROTTLE:
//
//	config: {rate: 10, per: 1s, burst: 4}
//
// Requests are spaced by the emission interval T = per / rate. A subject
// with no recent history may make burst + 1 requests at once (the reported
// limit); after that, one more every T. The state is the subject's
// theoretical arrival time (TAT): when the subject's requests would have
// ended had they arrived exactly every T. A request for n units is allowed
// when
//
//	max(TAT, now) + n·T − now <= τ, with the tolerance τ = (burst + 1)·T,
//
// and then moves TAT to max(TAT, now) + n·T. Denied requests change nothing.
//
// Answers, all exact to the microsecond:
//
//   - limit is burst + 1, the most units allowed at one instant;
//   - remaining is how many single units would be allowed right now;
//   - reset is the time until TAT, when the subject is back to a full burst;
//   - retry_after of a denial is the least time after which the same request
//     would be allowed: TAT + n·T − τ − now, rounded up to the microsecond. A
//     request for more than limit units can never be allowed: its retry_after
//     is reset (and best_effort grants what is left instead).
//   - hits: 0 peeks: allowed when one unit would be, nothing consumed.
//   - hits < 0 refunds: TAT moves back by |hits|·T, never before now.
//   - best_effort grants remaining when fewer than hits are left.
//   - dedup_id is ignored.
//
// Arithmetic is integer only. Times are counted in 1/rate µs ("ticks"), in
// which T is exactly per (in µs) ticks, so any rate works, 3 per second
// included. The script stores TAT as whole µs plus the sub-µs remainder in
// ticks, and works with TAT − now in ticks, which Configure keeps below
// 2^53, where Lua's numbers (doubles) are exact integers.
//
// Time is Redis time (the host prelude's ruled_now_us), never the caller's.
//
// The package builds natively and, through ./wasm, as a Wasm module:
//
//	ruled plugin build ./examples/plugins/gcra/wasm -o gcra.wasm
package gcra

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
const Name = "gcra"

// Version is the plugin's version, reported by `ruled plugin inspect`.
const Version = "1.0.0"

// DefaultPer is the period of rate when the config does not give one.
const DefaultPer = time.Second

// MaxExact bounds (burst + 1) × per (in µs) + rate: the largest TAT − now
// in ticks plus one tick of slack, so that every number the script computes
// is an exact integer in Lua.
const MaxExact = 1 << 53

// commands are the Redis commands the script calls, as Info declares them.
var commands = []string{"HMGET", "HSET", "PEXPIRE", "DEL"}

// Config is the parsed rule config.
type Config struct {
	// Rate is how many units are allowed per Per in the long run, at least 1.
	Rate int64
	// Per is the period of Rate, at least 1µs and a whole number of
	// microseconds. Default 1s.
	Per time.Duration
	// Burst is how many units beyond the steady rate a subject may use at
	// once, at least 0: a subject with no recent history gets Burst + 1.
	Burst int64
}

// Limit is the most units allowed at one instant: Burst + 1.
func (c Config) Limit() int64 { return c.Burst + 1 }

// Window is the tolerance τ = (Burst + 1) × Per / Rate, rounded up to the
// microsecond: the time over which Limit units are restored. It is the
// window of the RateLimit-Policy header.
func (c Config) Window() time.Duration {
	tau := c.Limit() * c.Per.Microseconds()
	return time.Duration(ceilDiv(tau, c.Rate)) * time.Microsecond
}

// Plugin is the algorithm. The zero value is ready to use.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm: one script and exactly the commands it calls.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: Version, Scripts: []sdk.Script{{
		Name:     "decide",
		Source:   script,
		Commands: append([]string(nil), commands...),
		Returns:  sdk.DecisionShape,
	}},
		// A denial changes nothing and holds until its retry-after; n hits
		// at once decide as n single hits at that instant; hits < 0 refunds.
		Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm. rate and burst are required; per
// defaults to 1s.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Rate:  r.RequireInt("rate"),
		Per:   r.Duration("per", DefaultPer),
		Burst: r.RequireInt("burst"),
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	r.Check(c.Rate >= 1 && c.Rate < MaxExact, "rate", "must be between 1 and 2^53-1, got %d", c.Rate)
	r.Check(c.Per >= time.Microsecond, "per", "must be at least 1µs, got %s", c.Per)
	r.Check(c.Per%time.Microsecond == 0, "per", "must be a whole number of microseconds, got %s", c.Per)
	r.Check(c.Burst >= 0, "burst", "must be at least 0, got %d", c.Burst)
	if err := r.Done(); err != nil {
		return nil, err
	}
	if per := c.Per.Microseconds(); c.Burst >= (MaxExact-c.Rate)/per {
		r.Fail("burst", "(burst + 1) × per in µs + rate must stay below 2^53 to count exactly, got (%d + 1) × %d + %d: lower burst or per",
			c.Burst, per, c.Rate)
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// decideKeys are the decide script's keys: the subject's theoretical
// arrival time.
var decideKeys = []string{"tat"}

// Decide implements sdk.Algorithm by running its one step.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, req)
}

// Start implements sdk.Stepper: one script call on the subject's key "tat",
// whose reply is the decision. The host runs it, so a Wasm instance of the
// plugin is not held while Redis answers.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("gcra: config of type %T", cfg)
	}
	return gcraStep(c, req.Hits, sdk.FieldBestEffort.Of(req)), nil
}

// Template implements sdk.Templater: every decision's step is the same but
// for the request's hits and best effort, so ruled starts decisions itself
// and the module's code runs only at Configure.
func (Plugin) Template(cfg sdk.Config) (sdk.Step, bool) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, false
	}
	return gcraStep(c, sdk.FieldHits, sdk.FieldBestEffort), true
}

// gcraStep is the one step of a decision, with the request's hits and best
// effort (0 or 1) as given: values in Start, fields in Template.
func gcraStep(c Config, hits, best any) sdk.Step {
	return sdk.Run("decide", decideKeys, c.Rate, c.Per.Microseconds(), c.Burst, hits, best).ThenDecide(c.Window())
}

// ceilDiv is a / b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}

var _ sdk.Templater = Plugin{}
