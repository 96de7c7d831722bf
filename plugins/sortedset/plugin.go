// Package sortedset is the rolling log: every action of a subject is kept
// in a Redis sorted set scored by its time in microseconds, so that limits
// hold over any window ending now. One script checks a primary rate, any
// number of extra rates and a minimum gap between admitted actions at once.
//
// A rate with limit 0 (the primary one or one in also) blocks the subject:
// every request for hits is denied, with retry_after and reset the longest
// window among the rates of limit 0 (an action made now would leave that
// window then); a peek is denied the same way, as in a full window (limit
// and remaining 0). Neither needs the log, so Decide answers them without
// calling Redis: nothing is logged, even with count_denied, and the gap is
// not touched. A refund runs the script as usual, forgets entries logged
// before the block, and reports the block.
package sortedset

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
const Name = "sortedset"

// Bounds checked by Configure.
const (
	// MaxLimit bounds every limit: the log keeps up to the largest limit of
	// entries per subject, and one script may add that many at once.
	MaxLimit = 100_000
	// MaxWindow bounds windows and the minimum gap.
	MaxWindow = 10_000 * time.Hour
	// MaxRates bounds the number of rates (the primary one and also).
	MaxRates = 16
)

// Rate is one limit per window.
type Rate struct {
	Limit  int64         // actions allowed in any window, 0..MaxLimit; 0 blocks the subject
	Window time.Duration // window length, a whole number of µs, 1ms..MaxWindow
}

// Config is the parsed rule config.
type Config struct {
	Limit       int64         // actions allowed per Window, 0..MaxLimit; 0 blocks the subject
	Window      time.Duration // window length, a whole number of µs, 1ms..MaxWindow
	MinGap      time.Duration // least time between two admitted actions, default 0
	Also        []Rate        // extra rates, all checked with the first
	CountDenied bool          // log denied actions too, default false
}

// Rates returns every rate: the primary one first, then Also.
func (c Config) Rates() []Rate {
	return append([]Rate{{Limit: c.Limit, Window: c.Window}}, c.Also...)
}

// blockWindow returns the longest window among the rates of limit 0, or
// 0 when no rate blocks (a window is at least 1 ms). It runs on every
// decision, so it walks the rates without building Rates.
func (c Config) blockWindow() time.Duration {
	var w time.Duration
	if c.Limit == 0 {
		w = c.Window
	}
	for _, rt := range c.Also {
		if rt.Limit == 0 {
			w = max(w, rt.Window)
		}
	}
	return w
}

// blockDecision is a block's answer to a request of hits >= 0 when the
// longest window of the rates of limit 0 is window: hits and peeks alike
// are denied until window has passed. Limit and Remaining are 0.
func blockDecision(window time.Duration) sdk.Decision {
	return sdk.Decision{Window: window, Reset: window, RetryAfter: window}
}

// Plugin is the rolling-log algorithm. The zero value is ready to use.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "1.0.0", Scripts: []sdk.Script{{
		Name:   "decide",
		Source: script,
		Commands: []string{"ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZCOUNT", "ZCARD", "ZRANGE", "ZADD",
			"HMGET", "HSET", "PEXPIRE"},
		Returns: decideReply,
	}},
		// Denials are not firm (with count_denied a denied request extends the
		// denial) and grants are not leasable (min_gap spaces requests).
		Traits: sdk.Traits{Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Limit:       r.RequireInt("limit"),
		Window:      r.RequireDuration("window"),
		MinGap:      r.Duration("min_gap", 0),
		CountDenied: r.Bool("count_denied", false),
	}
	orig, _ := raw["also"].([]any)
	pos := 0 // index in orig of the next mapping, for error messages
	for _, m := range r.List("also") {
		for pos < len(orig) {
			if _, isMap := orig[pos].(map[string]any); isMap {
				break
			}
			pos++
		}
		key := fmt.Sprintf("also[%d]", pos)
		pos++
		sub := sdk.NewConfigReader(m)
		rate := Rate{Limit: sub.RequireInt("limit"), Window: sub.RequireDuration("window")}
		if sub.Done() == nil {
			checkRate(sub, rate)
		}
		if err := sub.Done(); err != nil {
			for _, e := range unjoin(err) {
				r.Fail(key, "%v", e)
			}
			continue
		}
		c.Also = append(c.Also, rate)
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("sortedset: %w", err)
	}
	checkRate(r, Rate{Limit: c.Limit, Window: c.Window})
	r.Check(c.MinGap >= 0 && c.MinGap <= MaxWindow && c.MinGap%time.Microsecond == 0, "min_gap",
		"must be a whole number of microseconds from 0 to %s, got %s", MaxWindow, c.MinGap)
	r.Check(1+len(c.Also) <= MaxRates, "also", "at most %d extra rates, got %d", MaxRates-1, len(c.Also))
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("sortedset: %w", err)
	}
	return c, nil
}

func checkRate(r *sdk.ConfigReader, rate Rate) {
	r.Check(rate.Limit >= 0 && rate.Limit <= MaxLimit, "limit",
		"must be from 0 (0 blocks the subject) to %d, got %d (for larger limits use the rolling or fixedwindow plugin)", MaxLimit, rate.Limit)
	r.Check(rate.Window >= time.Millisecond && rate.Window <= MaxWindow && rate.Window%time.Microsecond == 0, "window",
		"must be a whole number of microseconds from 1ms to %s, got %s", MaxWindow, rate.Window)
}

// unjoin splits an errors.Join result.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// decideKeys are the decide script's keys, shared by every call.
var decideKeys = []string{"log", "meta"}

// decideReply is the decide script's reply: a decision, whose window is
// that of the configured rate its limit, remaining and reset describe.
var decideReply = sdk.NewShape(sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit, sdk.FieldRemaining,
	sdk.FieldReset, sdk.FieldRetryAfter, sdk.FieldDelay, sdk.FieldWindow)

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// Decide implements sdk.Algorithm. DedupID is ignored.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, req)
}

// Start implements sdk.Stepper: one script call, whose reply is the decision
// (with the window of the rate it describes), or for a block and hits >= 0
// the decision at once, without Redis.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("sortedset: config of type %T", cfg)
	}
	if w := c.blockWindow(); w > 0 && req.Hits >= 0 {
		return sdk.Done(blockDecision(w)), nil
	}
	return setStep(c, req.Hits, sdk.FieldBestEffort.Of(req)), nil
}

// Template implements sdk.Templater: the step is the same for every
// request but for its hits and best effort, except under a block (a limit
// of 0), where Start answers a hit without a call and a refund with one.
func (Plugin) Template(cfg sdk.Config) (sdk.Step, bool) {
	c, ok := cfg.(Config)
	if !ok || c.blockWindow() > 0 {
		return sdk.Step{}, false
	}
	return setStep(c, sdk.FieldHits, sdk.FieldBestEffort), true
}

// setStep is a decision's one step, with the request's hits and best
// effort (0 or 1) as given: values in Start, fields in Template.
func setStep(c Config, hits, best any) sdk.Step {
	rates := c.Rates()
	args := make([]any, 0, 2*len(rates)+5)
	args = append(args, len(rates))
	for _, rt := range rates {
		args = append(args, rt.Limit, rt.Window.Microseconds())
	}
	countDenied := 0
	if c.CountDenied {
		countDenied = 1
	}
	args = append(args, c.MinGap.Microseconds(), countDenied, hits, best)
	return sdk.Run("decide", decideKeys, args...).ThenDecide(c.Window)
}

var _ sdk.Templater = Plugin{}
