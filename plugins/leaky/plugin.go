// Package leaky is the leaky bucket: a funnel of capacity units per subject
// that drains rate units per per. In police mode a request that would
// overflow the funnel is denied; in shape mode an admitted request also gets
// a delay so that admitted units leave at a constant rate.
//
// There is no block form: capacity 0 or rate 0 is a load error that points
// to fixedwindow's limit: 0. A funnel of 0 units has no window whose end a
// block could report (its reset and policy window would be 0), and a
// leaky bucket without burst (nginx's limit_req with burst=0) still passes
// requests at the rate, so capacity 0 need not read as "deny everything".
package leaky

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
const Name = "leaky"

// Mode says what the bucket does with the requests it admits.
type Mode string

// Modes.
const (
	// Police admits a request at once when it fits and denies it otherwise.
	Police Mode = "police"
	// Shape admits the same requests as Police, each with a delay so that
	// admitted units leave one interval (per / rate) apart.
	Shape Mode = "shape"
)

// maxScaled bounds capacity × per (in µs) and rate: the script keeps the
// level scaled by per, and every intermediate value must stay below 2^53,
// where Lua's doubles hold integers exactly.
const maxScaled = 1 << 52

// Config is the parsed rule config.
type Config struct {
	Capacity int64         // units the bucket holds, at least 1
	Rate     int64         // units drained per Per, at least 1
	Per      time.Duration // drain period, a whole number of µs, default 1s
	Mode     Mode          // Police (default) or Shape
}

// PerUS returns Per in microseconds.
func (c Config) PerUS() int64 { return c.Per.Microseconds() }

// Window is the time a full bucket takes to drain, rounded up to the
// microsecond: the period the capacity applies to in RateLimit-Policy.
// It is also the back-off hint for a request that can never fit.
func (c Config) Window() time.Duration {
	return time.Duration(ceilDiv(c.Capacity*c.PerUS(), c.Rate)) * time.Microsecond
}

// Plugin is the leaky-bucket algorithm. The zero value is ready to use.
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
		Commands: []string{"HMGET", "HSET", "PEXPIRE", "DEL"},
		Returns:  decideReply,
	}},
		// Not leasable: in shape mode a grant carries its own delay.
		Traits: sdk.Traits{FirmDenials: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Capacity: r.RequireInt("capacity"),
		Rate:     r.RequireInt("rate"),
		Per:      r.Duration("per", time.Second),
		Mode:     Mode(r.String("mode", string(Police))),
	}
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("leaky: %w", err)
	}
	r.Check(c.Capacity >= 1, "capacity", "must be at least 1, got %d%s", c.Capacity, blockHint(c.Capacity))
	r.Check(c.Rate >= 1, "rate", "must be at least 1, got %d%s", c.Rate, blockHint(c.Rate))
	r.Check(c.Rate <= maxScaled, "rate", "must be at most 2^52, got %d", c.Rate)
	perOK := c.Per >= time.Microsecond && c.Per%time.Microsecond == 0
	r.Check(perOK, "per", "must be a whole number of microseconds, at least 1µs, got %s", c.Per)
	if perOK && c.Capacity >= 1 {
		r.Check(c.Capacity <= maxScaled/c.PerUS(), "capacity",
			"capacity × per must be at most 2^52µs (about 142 years), got %d × %s", c.Capacity, c.Per)
	}
	r.Check(c.Mode == Police || c.Mode == Shape, "mode", "must be %q or %q, got %q", Police, Shape, c.Mode)
	if err := r.Done(); err != nil {
		return nil, fmt.Errorf("leaky: %w", err)
	}
	return c, nil
}

// blockHint is what a config error adds to a value of 0: the plugin has no
// block form, and where to find one.
func blockHint(v int64) string {
	if v != 0 {
		return ""
	}
	return " (a leaky bucket cannot block; to block a subject, use a fixedwindow rule with limit: 0)"
}

// decideKeys are the decide script's keys, shared by every call.
var decideKeys = []string{"bucket"}

// decideReply is the decide script's reply: a decision with the delay of a
// shaped grant.
var decideReply = sdk.NewShape(sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit, sdk.FieldRemaining,
	sdk.FieldReset, sdk.FieldRetryAfter, sdk.FieldDelay)

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// Decide implements sdk.Algorithm. DedupID is ignored.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, req)
}

// Start implements sdk.Stepper: one script call, whose reply is the decision.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("leaky: config of type %T", cfg)
	}
	return bucketStep(c, req.Hits, sdk.FieldBestEffort.Of(req)), nil
}

// Template implements sdk.Templater: the step is the same for every
// request but for its hits and best effort.
func (Plugin) Template(cfg sdk.Config) (sdk.Step, bool) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, false
	}
	return bucketStep(c, sdk.FieldHits, sdk.FieldBestEffort), true
}

// bucketStep is a decision's one step, with the request's hits and best
// effort (0 or 1) as given: values in Start, fields in Template.
func bucketStep(c Config, hits, best any) sdk.Step {
	shape := 0
	if c.Mode == Shape {
		shape = 1
	}
	window := c.Window()
	return sdk.Run("decide", decideKeys, c.Capacity, c.PerUS(), c.Rate, shape, hits, best, window.Microseconds()).
		ThenDecide(window)
}

// ceilDiv is ⌈a / b⌉ for a >= 0 and b >= 1.
func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a-1)/b + 1
}

var _ sdk.Templater = Plugin{}
