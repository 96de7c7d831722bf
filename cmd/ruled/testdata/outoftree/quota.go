// Package quota is a fixed-window limit written outside ruled's repository:
// at most limit hits per window, windows aligned to Redis time.
//
//	config: {limit: 100, window: 1m}
//
// hits <= 0, dedup_id and best_effort are not supported: such requests are
// allowed and change nothing.
package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// script counts hits in KEYS[1] = {s = window start (µs), n = count}.
// ARGV: limit, window (µs), hits. It replies with sdk.DecisionShape.
const script = `
local limit, window, hits = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local now = ruled_now_us()
local start = now - math.fmod(now, window)
local reset = start + window - now
local cur = redis.call('HMGET', KEYS[1], 's', 'n')
local count = 0
if cur[1] == string.format('%d', start) then count = tonumber(cur[2]) end
if hits <= 0 then return {1, 0, limit, math.max(limit - count, 0), reset, 0} end
if count + hits > limit then return {0, 0, limit, math.max(limit - count, 0), reset, reset} end
count = count + hits
redis.call('HSET', KEYS[1], 's', string.format('%d', start), 'n', count)
redis.call('PEXPIRE', KEYS[1], math.floor(reset / 1000) + 1000)
return {1, hits, limit, limit - count, reset, 0}
`

// Config is the parsed rule config.
type Config struct {
	Limit  int64         // hits per window, at least 1
	Window time.Duration // at least 1ms, whole microseconds
}

// Plugin is the algorithm.
type Plugin struct {
	sdk.OneStep // its one step decides: nothing to resume
}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// Info implements sdk.Algorithm: one script, the commands it calls and the
// reply it returns.
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: "quota", Version: "0.1.0", Scripts: []sdk.Script{{
		Name: "decide", Source: script, Commands: []string{"HMGET", "HSET", "PEXPIRE"},
		Returns: sdk.DecisionShape,
	}}}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := Config{Limit: r.RequireInt("limit"), Window: r.RequireDuration("window")}
	r.Check(c.Limit >= 1, "limit", "must be at least 1")
	r.Check(c.Window >= time.Millisecond && c.Window%time.Microsecond == 0, "window", "must be whole microseconds, at least 1ms")
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

// decide is Decide: the plugin's steps, run through the host.
var decide = sdk.StepDecide(Plugin{})

// Decide implements sdk.Algorithm by running the plugin's steps.
func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
	return decide(ctx, h, cfg, req)
}

// Start implements sdk.Stepper: ruled runs the script, and its reply is the
// decision.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("quota: config of type %T", cfg)
	}
	return sdk.Run("decide", []string{"n"}, c.Limit, c.Window.Microseconds(), req.Hits).ThenDecide(c.Window), nil
}
