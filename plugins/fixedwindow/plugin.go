// Package fixedwindow is the fixed-window counter: at most limit hits per
// window, windows aligned to Redis time plus an optional offset, or
// calendar periods (hour, day, ISO week, month) of an IANA time zone.
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

// Config is the parsed rule config: a fixed window (Window, Offset) or a
// calendar period (Calendar, Location).
type Config struct {
	Limit  int64         // hits allowed per window, at least 0; 0 blocks the subject
	Window time.Duration // window length, at least 1ms; 0 with Calendar
	Offset time.Duration // shift of window boundaries, 0 <= offset < window
	// Calendar is the period counted in, "" for a fixed window, else
	// CalendarHour, CalendarDay, CalendarWeek or CalendarMonth.
	Calendar string
	// Location is the zone whose clock the calendar periods follow (rule
	// key tz, UTC by default); nil for a fixed window.
	Location *time.Location

	// cache holds the last periods found, for a calendar; nil otherwise.
	cache *periodCache
}

// String shows the config as %+v would, without the fields of the other
// kind of window and the cache.
func (c Config) String() string {
	if c.Calendar == "" {
		return fmt.Sprintf("{Limit:%d Window:%s Offset:%s}", c.Limit, c.Window, c.Offset)
	}
	return fmt.Sprintf("{Limit:%d Calendar:%s Location:%s}", c.Limit, c.Calendar, c.calendar().loc)
}

// GoString is %#v's form: the values, without the cache's address, so
// that two configs of the same values print alike (the local limiters of
// on_error: local are keyed so, and keep their counts across a reload).
func (c Config) GoString() string { return "fixedwindow.Config" + c.String() }

func (c Config) calendar() calendar {
	if c.Location == nil {
		return calendar{kind: c.Calendar, loc: time.UTC}
	}
	return calendar{kind: c.Calendar, loc: c.Location}
}

// MaxExact bounds limit: Lua numbers, and so the script's counts, are
// exact integers below 2^53.
const MaxExact = 1 << 53

// Plugin is the fixed-window algorithm. The zero value is ready to use.
type Plugin struct{}

// New returns the plugin.
func New() sdk.Algorithm { return Plugin{} }

// calendarShape is the reply of the calendar script: a decision with the
// period's length, or, when Redis time lies outside every period offered,
// window_us 0 (a miss) and nothing else but now_us, the Redis time.
var calendarShape = sdk.NewShape(sdk.FieldAllowed, sdk.FieldGranted, sdk.FieldLimit, sdk.FieldRemaining,
	sdk.FieldReset, sdk.FieldRetryAfter, sdk.FieldWindow, "now_us")

// Info implements sdk.Algorithm. Both scripts are script.lua: "decide"
// for fixed windows, "calendar" for calendar periods, whose reply also
// carries the period and Redis time. (examples/plugins/assemblyscript
// reads the first literal's name and commands from this file.)
func (Plugin) Info() sdk.Info {
	return sdk.Info{Name: Name, Version: "2.0.0", Scripts: []sdk.Script{{
		Name:     "decide",
		Source:   script,
		Commands: []string{"HMGET", "HGET", "HSET", "HINCRBY", "HDEL", "DEL", "PEXPIRE"},
		Returns:  sdk.DecisionShape,
	}, {
		Name:     "calendar",
		Source:   script,
		Commands: []string{"HMGET", "HGET", "HSET", "HINCRBY", "HDEL", "DEL", "PEXPIRE"},
		Returns:  calendarShape,
	}},
		Traits: sdk.Traits{FirmDenials: true, Leasable: true, Refunds: true},
	}
}

// Configure implements sdk.Algorithm.
func (Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	if r.Has("calendar") {
		return configureCalendar(r, raw)
	}
	c := Config{
		Limit:  r.RequireInt("limit"),
		Window: r.RequireDuration("window"),
		Offset: r.Duration("offset", 0),
	}
	if r.Has("tz") {
		r.String("tz", "")
		r.Fail("tz", "only with calendar (a fixed window counts on the UTC clock: move it with offset)")
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	checkLimit(r, c.Limit)
	r.Check(c.Window >= time.Millisecond, "window", "must be at least 1ms, got %s", c.Window)
	r.Check(c.Window%time.Microsecond == 0, "window", "must be a whole number of microseconds")
	r.Check(c.Offset >= 0 && c.Offset < c.Window, "offset", "must be at least 0 and less than window (%s), got %s", c.Window, c.Offset)
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

func checkLimit(r *sdk.ConfigReader, limit int64) {
	r.Check(limit >= 0, "limit", "must be at least 0 (0 blocks the subject), got %d", limit)
	r.Check(limit < MaxExact, "limit", "must be below 2^53, got %d", limit)
}

// configureCalendar reads a config with calendar: limit, calendar and tz.
func configureCalendar(r *sdk.ConfigReader, raw map[string]any) (sdk.Config, error) {
	c := Config{Limit: r.RequireInt("limit"), Calendar: r.String("calendar", ""), Location: time.UTC}
	switch c.Calendar {
	case CalendarHour, CalendarDay, CalendarWeek, CalendarMonth:
	default:
		if _, isString := raw["calendar"].(string); isString {
			r.Fail("calendar", "want hour, day, week or month, got %q", c.Calendar)
		}
	}
	if r.Has("window") {
		r.Duration("window", 0)
		r.Fail("window", "not allowed with calendar: the calendar period is the window")
	}
	if r.Has("offset") {
		r.Duration("offset", 0)
		r.Fail("offset", "not allowed with calendar: periods begin on the clock of tz")
	}
	if name := r.String("tz", "UTC"); r.Has("tz") {
		if _, isString := raw["tz"].(string); isString {
			loc, err := loadZone(name)
			if err != nil {
				r.Fail("tz", "%v", err)
			}
			c.Location = loc
		}
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	checkLimit(r, c.Limit)
	if err := r.Done(); err != nil {
		return nil, err
	}
	c.cache = new(periodCache)
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

// Start implements sdk.Stepper. A fixed window takes one script call,
// whose reply is the decision. A calendar offers the script the periods
// its cache holds (at first, those of the local clock) and is resumed
// with the reply.
func (Plugin) Start(_ context.Context, cfg sdk.Config, req sdk.Request) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok {
		return sdk.Step{}, fmt.Errorf("fixedwindow: config of type %T", cfg)
	}
	if c.Calendar == "" {
		return windowStep(c, req.Hits, req.DedupID, sdk.FieldBestEffort.Of(req)), nil
	}
	var p *periods
	if c.cache != nil {
		p = c.cache.Load()
	}
	if p == nil {
		// A guess only: the script checks it against Redis time.
		p = c.calendar().periodsAt(time.Now().UnixMicro())
		if c.cache != nil {
			c.cache.CompareAndSwap(nil, p)
		}
	}
	return calendarStep(c, req, p, 0), nil
}

// Template implements sdk.Templater: a fixed window's step is the same for
// every request but for its hits, dedup id and best effort. A calendar's
// has none: the periods it offers move with the clock.
func (Plugin) Template(cfg sdk.Config) (sdk.Step, bool) {
	c, ok := cfg.(Config)
	if !ok || c.Calendar != "" {
		return sdk.Step{}, false
	}
	return windowStep(c, sdk.FieldHits, sdk.FieldDedupID, sdk.FieldBestEffort), true
}

// windowStep is a fixed window's one step, with the request's hits, dedup
// id and best effort (0 or 1) as given: values in Start, fields in
// Template.
func windowStep(c Config, hits, dedupID, best any) sdk.Step {
	return sdk.Run("decide", decideKeys, c.Limit, c.Window.Microseconds(), c.Offset.Microseconds(), hits, dedupID, best).
		ThenDecide(c.Window)
}

// maxMisses is how many calls running whose Redis time lies outside the
// periods offered fail a decision. Each offer after a miss is computed
// around the Redis time the miss gave, so only a Redis clock that moves by
// a period within a round trip misses again.
const maxMisses = 3

// missStates are the States of calendar steps after 0, 1 and 2 misses,
// shared by every call: the host only reads a step's State.
var missStates = [maxMisses][]byte{{0}, {1}, {2}}

// calendarStep is a call of the calendar script offering p's periods, after
// misses misses (kept in the step's State).
func calendarStep(c Config, req sdk.Request, p *periods, misses byte) sdk.Step {
	best := 0
	if req.BestEffort {
		best = 1
	}
	s := sdk.Run("calendar", decideKeys, c.Limit, 0, 0, req.Hits, req.DedupID, best, p.us[0], p.us[1], p.us[2])
	s.State = missStates[misses]
	return s
}

// Resume implements sdk.Stepper for a calendar: the reply is the decision,
// or a miss with Redis time, around which the next call's periods are
// computed. It reads nothing of s but Script and State, which is all the
// host keeps of a step of a plugin not linked into ruled.
func (Plugin) Resume(_ context.Context, cfg sdk.Config, req sdk.Request, s sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	c, ok := cfg.(Config)
	if !ok || c.Calendar == "" || s.Script != "calendar" || len(s.State) != 1 {
		return sdk.Step{}, fmt.Errorf("fixedwindow: resumed after %q with config %T", s.Script, cfg)
	}
	window, err := calendarShape.Int(reply, sdk.FieldWindow)
	if err != nil {
		return sdk.Step{}, fmt.Errorf("fixedwindow: calendar: %w", err)
	}
	now, err := calendarShape.Int(reply, "now_us")
	if err != nil {
		return sdk.Step{}, fmt.Errorf("fixedwindow: calendar: %w", err)
	}
	cal := c.calendar()
	if window == 0 {
		misses := s.State[0] + 1
		if misses >= maxMisses {
			return sdk.Step{}, fmt.Errorf("fixedwindow: calendar: Redis time %d lies outside the periods offered, %d times running", now, misses)
		}
		p := cal.periodsAt(now)
		if c.cache != nil {
			c.cache.Store(p)
		}
		return calendarStep(c, req, p, misses), nil
	}
	d, err := calendarShape.Decision(reply, 0)
	if err != nil {
		return sdk.Step{}, fmt.Errorf("fixedwindow: calendar: %w", err)
	}
	// Keep the cache on the period Redis time is in, so that the next
	// decisions offer it first.
	end := now + d.Reset.Microseconds()
	if c.cache == nil {
		return sdk.Done(d), nil
	}
	if p := c.cache.Load(); p == nil || p.us[1] != end {
		if p != nil && p.us[2] == end {
			c.cache.CompareAndSwap(p, cal.roll(p))
		} else {
			c.cache.Store(cal.periodsAt(now))
		}
	}
	return sdk.Done(d), nil
}

var _ sdk.Templater = Plugin{}
