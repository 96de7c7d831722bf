// Package fixedwindow is the fixed-window counter: at most limit hits per
// window, windows aligned to Redis time plus an optional offset.
//
// limit 0 blocks the subject: every request for hits is denied, with
// retry_after and reset the end of the current window; a peek is denied
// the same way, as in an exhausted window (limit and remaining 0), and a
// refund gives back what the window counted before the block as usual. The script decides a block of hits >= 0 from
// Redis time alone, without reading or writing the subject's keys.
package fixedwindow

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
const Name = "fixedwindow"

// Config is the parsed rule config.
type Config struct {
	Limit  int64         // hits allowed per window, at least 0; 0 blocks the subject
	Window time.Duration // window length, at least 1ms
	Offset time.Duration // shift of window boundaries, 0 <= offset < window
}

// MaxExact bounds limit: Lua numbers, and so the script's counts, are
// exact integers below 2^53.
const MaxExact = 1 << 53

// Plugin is the fixed-window algorithm. The zero value is ready to use.
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
		Commands: []string{"HMGET", "HGET", "HSET", "HDEL", "DEL", "PEXPIRE"},
		Returns:  sdk.DecisionShape,
	}},
		Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Limit:  r.RequireInt("limit"),
		Window: r.RequireDuration("window"),
		Offset: r.Duration("offset", 0),
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	r.Check(c.Limit >= 0, "limit", "must be at least 0 (0 blocks the subject), got %d", c.Limit)
	r.Check(c.Limit < MaxExact, "limit", "must be below 2^53, got %d", c.Limit)
	r.Check(c.Window >= time.Millisecond, "window", "must be at least 1ms, got %s", c.Window)
	r.Check(c.Window%time.Microsecond == 0, "window", "must be a whole number of microseconds")
	r.Check(c.Offset >= 0 && c.Offset < c.Window, "offset", "must be at least 0 and less than window (%s), got %s", c.Window, c.Offset)
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// decideKeys are the decide script's keys, shared by every call.
var decideKeys = []string{"c", "d"}

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
		return sdk.Step{}, fmt.Errorf("fixedwindow: config of type %T", cfg)
	}
	best := 0
	if req.BestEffort {
		best = 1
	}
	return sdk.Run("decide", decideKeys,
		c.Limit, c.Window.Microseconds(), c.Offset.Microseconds(), req.Hits, req.DedupID, best).ThenDecide(c.Window), nil
}

var _ sdk.Stepper = Plugin{}
