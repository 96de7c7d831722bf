// Package host is the core of the ruled daemon: the Engine that takes a
// request through the rules, the plugins and the Redis capability to a
// combined decision. It is the only package that knows the whole path.
package host

import (
	"context"

	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// Options configure an Engine.
type Options struct {
	// Capability runs plugin scripts. Required.
	Capability *capability.Capability
	// Plugins are the algorithms rules may name (the built-ins, usually).
	// Their scripts run without the reply cap (capability.RegisterNative)
	// unless PluginsLoaded is set.
	Plugins []sdk.Algorithm
	// PluginsLoaded says Plugins run code that ruled loaded at run time
	// (the built-ins through the Wasm driver) rather than code compiled
	// into it: their scripts' replies are capped as every loaded plugin's
	// are (capability.Register).
	PluginsLoaded bool
	// Now is the clock of the in-process shortcuts (deny cache, rule leases):
	// time.Now unless a test injects the clock its scripts see.
	Now func() time.Time
	// Logger is the daemon's logger. Default slog.Default().
	Logger *slog.Logger
	// DenyCacheSize bounds the deny cache (default local.DefaultDenyCacheSize).
	DenyCacheSize int
	// Observer receives the engine's events, for metrics. Optional.
	Observer Observer
	// LoadPlugin loads the third-party plugins rule files declare. Without
	// it, rule files that declare plugins fail to load.
	LoadPlugin PluginLoader
	// NoShortcuts has every request decided by its plugin: no deny cache
	// and no rule leases, whatever the rules ask. ruled test --redis runs so, to
	// answer as the reference models do.
	NoShortcuts bool
	// DecisionTimeout bounds one check (default DecisionTimeoutCalls times
	// the capability's time-out): the Redis calls of all its rules and the
	// refunds of a denial share it, and a rule reached once it is spent
	// follows its on_error at once (ErrDecisionTimeout).
	DecisionTimeout time.Duration
	// Tracer, when set, gives each check a span (docs/operations.md,
	// "Tracing"); nil traces nothing.
	Tracer trace.Tracer
}

// DecisionTimeoutCalls is the default DecisionTimeout in calls: a check
// may wait for two Redis calls that time out, so that a rule whose node
// is slow leaves time for the next rule, on another node, to decide.
const DecisionTimeoutCalls = 2

// ErrDecisionTimeout is the error of a rule that was reached after its
// check's DecisionTimeout was spent, wrapped in a capability.Error of class
// timeout: the rule follows its on_error policy.
var ErrDecisionTimeout = errors.New("host: decision time-out spent before this rule ran")

// Engine answers checks. It is safe for concurrent use; Load swaps the rule
// set atomically and in-flight checks finish on the set they started with.
type Engine struct {
	cap        *capability.Capability
	log        *slog.Logger
	builtins   map[string]*plugin
	loadPlugin PluginLoader
	gen        atomic.Pointer[generation]

	loadMu sync.Mutex // serialises loads; guards source and loaded
	status atomic.Pointer[LoadStatus]
	source *RuleSource        // of the serving rules
	loaded map[string]*plugin // third-party plugins in use, by declaration

	obs         Observer
	subjectObs  SubjectObserver // obs, when it listens per subject
	slotObs     SlotObserver    // obs, when it listens to releases and renewals
	deny        *local.DenyCache
	local       *local.Limiters
	localInUse  atomic.Bool   // local limiters decided since Redis last answered
	clusterSize atomic.Int64  // live ruled instances, as last seen in Redis
	degradedLog *lograte.Gate // rate-limits "decision degraded" warnings, per rule
	warnLog     *lograte.Gate // rate-limits the other warnings a request can set off, per message and rule
	ruleLeases  *ruleLeases
	timeout     time.Duration    // DecisionTimeout
	now         func() time.Time // Options.Now
	noShortcuts bool             // Options.NoShortcuts
	tracer      trace.Tracer     // Options.Tracer; nil when off

	inspect      Inspector    // Inspect
	counters     Counters     // Counters
	clientLeases ClientLeases // ClientLeases
}

type plugin struct {
	alg sdk.Algorithm
	reg *capability.Plugin
	key string // declaration of a third-party plugin; "" for built-ins
}

// generation is one loaded rule set and the plugins its rules resolve to.
// A check runs on one generation from start to end.
type generation struct {
	engine  *Engine
	set     *rules.Set
	plugins map[string]*plugin
}

// Lookup implements rules.Catalog over the generation's plugins.
func (g *generation) Lookup(name string) (sdk.Algorithm, bool) {
	p, ok := g.plugins[name]
	if !ok {
		return nil, false
	}
	return p.alg, true
}

// Names implements rules.NameLister: the generation's plugin names, for
// "did you mean" suggestions.
func (g *generation) Names() []string { return slices.Collect(maps.Keys(g.plugins)) }

// NewEngine registers the plugins' scripts with the capability and returns
// an engine with an empty rule set.
func NewEngine(o Options) (*Engine, error) {
	if o.Capability == nil {
		return nil, errors.New("host: engine needs a capability")
	}
	e := &Engine{degradedLog: lograte.NewGate(gatedLogEvery), warnLog: lograte.NewGate(gatedLogEvery), cap: o.Capability, log: o.Logger, builtins: map[string]*plugin{}, loadPlugin: o.LoadPlugin, loaded: map[string]*plugin{},
		deny: local.NewDenyCache(o.DenyCacheSize, o.Now), local: local.NewLimiters(local.MaxLimiters), obs: o.Observer, ruleLeases: newRuleLeases(), now: o.Now}
	if e.now == nil {
		e.now = time.Now
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	e.subjectObs, _ = e.obs.(SubjectObserver)
	e.slotObs, _ = e.obs.(SlotObserver)
	e.timeout, e.noShortcuts, e.tracer = o.DecisionTimeout, o.NoShortcuts, o.Tracer
	if e.timeout <= 0 {
		e.timeout = DecisionTimeoutCalls * o.Capability.Timeout()
	}
	e.inspect, e.counters = Inspector{e}, Counters{e}
	e.clientLeases.e = e
	e.clientLeases.obs, _ = e.obs.(LeaseObserver)
	e.clusterSize.Store(1)
	if e.log == nil {
		e.log = slog.Default()
	}
	for _, alg := range o.Plugins {
		info := alg.Info()
		if _, dup := e.builtins[info.Name]; dup {
			return nil, fmt.Errorf("host: plugin %q registered twice", info.Name)
		}
		register := o.Capability.RegisterNative
		if o.PluginsLoaded {
			register = o.Capability.Register
		}
		reg, err := register(info.Name, info.Scripts)
		if err != nil {
			return nil, fmt.Errorf("host: %w", err)
		}
		e.builtins[info.Name] = &plugin{alg: alg, reg: reg}
	}
	g := &generation{engine: e, plugins: e.builtins}
	empty, err := rules.Compile(&rules.Files{}, g)
	if err != nil {
		return nil, fmt.Errorf("host: empty rule set: %w", err)
	}
	g.set = empty
	e.gen.Store(g)
	e.status.Store(&LoadStatus{})
	return e, nil
}

// Check decides a request against every matching rule.
//
// Rules are applied in order. When a non-shadow rule denies, the rules after
// it are not evaluated and what the rules before it granted is refunded, so
// that a denied request does not use up the other rules' quota.
func (e *Engine) Check(ctx context.Context, req *CheckRequest) Result {
	var res Result
	e.CheckInto(ctx, req, &res)
	return res
}

// CheckInto is Check writing into res, reusing res.Results' storage: a
// caller that decides in a loop (or pools its Results) allocates nothing
// per decision for them.
func (e *Engine) CheckInto(ctx context.Context, req *CheckRequest, res *Result) {
	if e.tracer != nil {
		var span trace.Span
		ctx, span = e.tracer.Start(ctx, "ruled.check")
		defer func() { endCheckSpan(span, []Result{*res}) }()
	}
	start := time.Now()
	e.check(ctx, newBudget(ctx, start, e.timeout), req, res)
	e.observe(res, start)
}

// observe tells the observer of a check's decisions and its duration.
func (e *Engine) observe(res *Result, start time.Time) {
	e.observeDecisions(res)
	e.obs.Check(time.Since(start), res.Allowed)
}

// observeDecisions tells the observer of each rule's decision of a check,
// and logs those that degraded.
func (e *Engine) observeDecisions(res *Result) {
	for i := range res.Results {
		rr := &res.Results[i]
		if rr.Degraded != DegradedNone {
			e.logDegraded(rr)
		}
		o := outcome(rr)
		e.obs.Decision(rr.Rule, rr.Plugin, o, rr.cached)
		if rr.detailed && e.subjectObs != nil {
			e.subjectObs.SubjectDecision(rr.Rule, rr.Subject, o)
		}
	}
}

// selections pools the per-check slices of matching rules.
var selections = sync.Pool{New: func() any { s := make([]rules.Selection, 0, 8); return &s }}

// DecisionTimeout returns the bound of one check.
func (e *Engine) DecisionTimeout() time.Duration { return e.timeout }

// ShareDecisionTimeout returns ctx bounded by checker's decision time-out
// when it has one (an *Engine does), for a request of several checks: each
// check made with it takes its deadline as its own, so that they all share
// one bound as the rules of one check do. Call cancel when they are done.
func ShareDecisionTimeout(ctx context.Context, checker any) (context.Context, context.CancelFunc) {
	if b, ok := checker.(interface{ DecisionTimeout() time.Duration }); ok {
		return context.WithTimeout(ctx, b.DecisionTimeout())
	}
	return ctx, func() {}
}

func (e *Engine) check(ctx context.Context, b budget, req *CheckRequest, res *Result) {
	g := e.gen.Load()
	in := rules.Input{Request: req.Request, Attrs: req.Attrs}
	buf := selections.Get().(*[]rules.Selection)
	sels := g.set.AppendMatch((*buf)[:0], &in)
	defer func() {
		clear(sels) // drop references to subjects and configs
		*buf = sels[:0]
		selections.Put(buf)
	}()
	decideRules(ctx, g, b, checkMode, sels, req, res)
}

// logDegraded logs a degraded decision: at most one WARN line per rule
// every gatedLogEvery.
func (e *Engine) logDegraded(rr *RuleResult) {
	if errors.Is(rr.Err, capability.ErrCircuitOpen) {
		return // logged once when the circuit opened
	}
	// At most one WARN line per rule every gatedLogEvery; the others go
	// to DEBUG and are counted in the next WARN line.
	lv, suppressed := slog.LevelDebug, int64(0)
	if warn, n := e.degradedLog.Allow(rr.Rule, time.Now()); warn {
		lv, suppressed = slog.LevelWarn, n
	} else if !e.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	e.log.Log(context.Background(), lv, "decision degraded", "rule", rr.Rule, "plugin", rr.Plugin,
		"policy", string(rr.Degraded), "class", string(capability.ClassOf(rr.Err)), "err", rr.Err, "suppressed", suppressed)
}
