// Package tokenbucket is the token bucket: a bucket of at most burst
// permits, refilled at rate permits per period from elapsed Redis time.
// Requests take permits out; a full bucket stays full while idle.
//
// Permits are counted exactly, with no floating-point time arithmetic: the
// script keeps level = permits × per (in µs), a request for n permits takes
// n × per out, and every elapsed microsecond adds rate. Configure keeps
// every such number below 2^53, where Lua's doubles are exact integers.
//
// dedup_id is not supported: it is ignored, so a retried request consumes
// again. Use fixedwindow or rolling where idempotent retries matter.
//
// There is no block form: burst 0 or rate 0 is a load error that points to
// fixedwindow's limit: 0. A bucket of 0 permits has no window whose end a
// block could report (its reset and policy window would be 0), and burst 0
// means different things elsewhere (no events at all in
// golang.org/x/time/rate, no burst beyond the rate in GCRA limiters).
package tokenbucket

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
const Name = "tokenbucket"

// DefaultPer is the refill period when the config does not say.
const DefaultPer = time.Second

// MaxExact bounds burst × per (in µs) + rate, so that the scaled level and
// every intermediate value stay exact integers in Lua (whose numbers are
// doubles).
const MaxExact = 1 << 53

// Config is the parsed rule config.
type Config struct {
	Rate  int64         // permits added per Per, at least 1
	Per   time.Duration // refill period, at least 1µs, a whole number of microseconds (default 1s)
	Burst int64         // capacity in permits, at least 1 (default Rate)
}

// Window is the time the bucket takes to refill from empty to full, the
// period over which Burst permits are restored: ceil(Burst × Per / Rate),
// rounded up to the microsecond.
func (c Config) Window() time.Duration {
	per := c.Per.Microseconds()
	return time.Duration((c.Burst*per+c.Rate-1)/c.Rate) * time.Microsecond
}

// Plugin is the token-bucket algorithm. The zero value is ready to use.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "1.1.0", Scripts: []sdk.Script{{
		Name:     "decide",
		Source:   script,
		Commands: []string{"HMGET", "HSET", "PEXPIRE", "DEL"},
		Returns:  sdk.DecisionShape,
	}},
		Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{
		Rate: r.RequireInt("rate"),
		Per:  r.Duration("per", DefaultPer),
	}
	c.Burst = r.Int("burst", c.Rate)
	if err := r.Done(); err != nil {
		return nil, err
	}
	r.Check(c.Rate >= 1 && c.Rate < MaxExact, "rate", "must be between 1 and 2^53-1, got %d%s", c.Rate, blockHint(c.Rate))
	r.Check(c.Per >= time.Microsecond, "per", "must be at least 1µs, got %s", c.Per)
	r.Check(c.Per%time.Microsecond == 0, "per", "must be a whole number of microseconds, got %s", c.Per)
	r.Check(c.Burst >= 1, "burst", "must be at least 1, got %d%s", c.Burst, blockHint(c.Burst))
	if err := r.Done(); err != nil {
		return nil, err
	}
	if per := c.Per.Microseconds(); c.Burst > (MaxExact-c.Rate)/per {
		r.Fail("burst", "burst × per in µs + rate must stay below 2^53 to count exactly, got %d × %d + %d: lower burst or per",
			c.Burst, per, c.Rate)
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// blockHint is what a config error adds to a value of 0: the plugin has no
// block form, and where to find one.
func blockHint(v int64) string {
	if v != 0 {
		return ""
	}
	return " (a token bucket cannot block; to block a subject, use a fixedwindow rule with limit: 0)"
}

// decideKeys are the decide script's keys, shared by every call.
var decideKeys = []string{"b"}

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
		return sdk.Step{}, fmt.Errorf("tokenbucket: config of type %T", cfg)
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
	return sdk.Run("decide", decideKeys, c.Rate, c.Per.Microseconds(), c.Burst, hits, best).ThenDecide(c.Window())
}

var _ sdk.Templater = Plugin{}
