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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/local"
	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// Request is the HTTP-level view of a request that rules match against.
type Request = rules.Request

// NormalizeHeaders returns h with lower-case names, as rules see them: h
// itself when it already has them.
func NormalizeHeaders(h map[string]string) map[string]string { return rules.NormalizeHeaders(h) }

// CheckRequest is one question put to the engine.
type CheckRequest struct {
	Request    Request
	Attrs      map[string]string
	Hits       int64 // 0 peeks; negative refunds where the plugin supports it
	DedupID    string
	BestEffort bool
}

// Bounds of a check body, the same for every API that takes one (HTTP,
// Envoy RLS, ruled test).
const (
	// MaxHits bounds the absolute value of a check's hits.
	MaxHits = 1_000_000_000
	// MaxDedupID bounds the length of a check's dedup id, in bytes.
	MaxDedupID = 256
)

// Degraded says how a decision was made when it could not be made by the
// plugin: the rule's on_error policy.
type Degraded string

// Degraded values; empty means the plugin decided.
const (
	DegradedNone  Degraded = ""
	DegradedAllow Degraded = "allow"
	DegradedDeny  Degraded = "deny"
	DegradedLocal Degraded = "local"
)

// RuleResult is one matching rule's decision.
type RuleResult struct {
	Rule    string
	Subject string
	Plugin  string
	Shadow  bool
	// Exempt is true for an exempt rule: it admitted the request without
	// a plugin and ended the evaluation.
	Exempt   bool
	Degraded Degraded
	// Err is why the decision is degraded, if it is, or the plugin's
	// refusal of the request as bad input (sdk.BadRequestError; Degraded
	// is then empty).
	Err error
	sdk.Decision

	cached    bool // answered by the deny cache
	detailed  bool // the rule asks for per-subject metrics
	cancelled bool // the caller gave up before the plugin decided
}

// ReportsLimit reports whether the result is a limit to tell clients of
// (RateLimit fields, RLS statuses): an enforcing rule, not shadow, whose
// plugin reported a limit.
func (rr *RuleResult) ReportsLimit() bool { return !rr.Shadow && rr.hasLimit() }

// hasLimit reports whether the plugin reported a limit: a positive one, or
// a block (limit 0) over a window.
func (rr *RuleResult) hasLimit() bool { return rr.Limit > 0 || (rr.Limit == 0 && rr.Window > 0) }

// badRequest reports whether the plugin refused the request as bad input:
// the only result with an error that is neither degraded nor cancelled.
func (rr *RuleResult) badRequest() bool {
	return rr.Err != nil && rr.Degraded == DegradedNone && !rr.cancelled
}

// Result is the combined decision for a request.
type Result struct {
	// Allowed is true when every non-shadow rule allowed.
	Allowed bool
	// FailClosed is true when the request was denied by an on_error: deny
	// policy rather than by a limit (HTTP answers 503).
	FailClosed bool
	// RetryAfter is the longest retry-after among the denying rules.
	RetryAfter time.Duration
	// BadRequest is set when a plugin refused the request as bad input
	// (sdk.BadRequestError): the request is denied, not on the rule's
	// on_error policy, and the HTTP API answers 400 with its message.
	BadRequest error
	// Results holds one entry per evaluated rule, in rule order.
	Results []RuleResult
}

// Policy returns the most restrictive non-shadow result with a limit (a
// denying rule with the longest retry-after, else the one with the fewest
// remaining), the one an Envoy RLS descriptor status reports, and false
// when there is none.
func (r *Result) Policy() (RuleResult, bool) { return r.policy(false) }

// ShadowPolicy returns the most restrictive shadow result with a limit,
// and false when there is none: what a shadow rule would have told
// clients.
func (r *Result) ShadowPolicy() (RuleResult, bool) { return r.policy(true) }

// policy returns the most restrictive result with a limit among the shadow
// results or among the enforcing ones.
func (r *Result) policy(shadow bool) (RuleResult, bool) {
	best, found := RuleResult{}, false
	for _, rr := range r.Results {
		if rr.Shadow != shadow || !rr.hasLimit() {
			continue
		}
		if !found || moreRestrictive(rr, best) {
			best, found = rr, true
		}
	}
	return best, found
}

func moreRestrictive(a, b RuleResult) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	if !a.Allowed {
		return a.RetryAfter > b.RetryAfter
	}
	if a.Remaining != b.Remaining {
		return a.Remaining < b.Remaining
	}
	return a.Reset > b.Reset
}

// Options configure an Engine.
type Options struct {
	// Capability runs plugin scripts. Required.
	Capability *capability.Capability
	// Plugins are the algorithms rules may name (the built-ins, usually).
	Plugins []sdk.Algorithm
	// Now is the clock of the in-process shortcuts (deny cache, leases):
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
	// and no leases, whatever the rules ask. ruled test --redis runs so, to
	// answer as the reference models do.
	NoShortcuts bool
	// DecisionTimeout bounds one check (default DecisionTimeoutCalls times
	// the capability's time-out): the Redis calls of all its rules and the
	// refunds of a denial share it, and a rule reached once it is spent
	// follows its on_error at once (ErrDecisionTimeout).
	DecisionTimeout time.Duration
}

// DecisionTimeoutCalls is the default DecisionTimeout in calls: a check
// may wait for two Redis calls that time out, so that a rule whose node
// is slow leaves time for the next rule, on another node, to decide.
const DecisionTimeoutCalls = 2

// ErrDecisionTimeout is the error of a rule that was reached after its
// check's DecisionTimeout was spent, wrapped in a capability.Error of class
// timeout: the rule follows its on_error policy.
var ErrDecisionTimeout = errors.New("host: decision time-out spent before this rule ran")

// Outcome classifies one rule's decision for metrics.
type Outcome string

// Outcomes.
const (
	OutcomeAllowed       Outcome = "allowed"
	OutcomeDenied        Outcome = "denied"
	OutcomeShadowDenied  Outcome = "shadow_denied"
	OutcomeDegradedAllow Outcome = "degraded_allow"
	OutcomeDegradedDeny  Outcome = "degraded_deny"
	OutcomeDegradedLocal Outcome = "degraded_local"
	// OutcomeBadRequest is a request the plugin refused as bad input: a
	// client's mistake, not a limit.
	OutcomeBadRequest Outcome = "bad_request"
	// OutcomeExempt is a request an exempt rule admitted.
	OutcomeExempt Outcome = "exempt"
	// OutcomeCancelled is a decision its caller gave up on (a client that
	// hung up): nobody waits for it, and Redis did not fail.
	OutcomeCancelled Outcome = "cancelled"
)

// Observer receives the engine's events. Implementations must be cheap and
// safe for concurrent use: they run on the decision path.
type Observer interface {
	// Decision is called once per evaluated rule of a check. cached is true
	// when the deny cache answered instead of Redis.
	Decision(rule, plugin string, outcome Outcome, cached bool)
	// Check is called once per check with its duration.
	Check(took time.Duration, allowed bool)
	// Reload is called after every load attempt; rules is the number of
	// serving rules afterwards.
	Reload(err error, rules int)
}

// SubjectObserver, when the engine's Observer implements it too, is told
// of every decision of a rule with detailed_metric: true, with its subject.
type SubjectObserver interface {
	SubjectDecision(rule, subject string, outcome Outcome)
}

// nopObserver is the Observer of an engine without one.
type nopObserver struct{}

func (nopObserver) Decision(string, string, Outcome, bool) {}
func (nopObserver) Check(time.Duration, bool)              {}
func (nopObserver) Reload(error, int)                      {}

// outcome classifies a rule result.
func outcome(rr *RuleResult) Outcome {
	switch {
	case rr.Exempt:
		return OutcomeExempt
	case rr.cancelled:
		return OutcomeCancelled
	case rr.Degraded == DegradedAllow:
		return OutcomeDegradedAllow
	case rr.Degraded == DegradedDeny:
		return OutcomeDegradedDeny
	case rr.Degraded == DegradedLocal:
		return OutcomeDegradedLocal
	case rr.Allowed:
		return OutcomeAllowed
	case rr.badRequest():
		return OutcomeBadRequest
	case rr.Shadow:
		return OutcomeShadowDenied
	default:
		return OutcomeDenied
	}
}

// Engine answers checks. It is safe for concurrent use; Load swaps the rule
// set atomically and in-flight checks finish on the set they started with.
type Engine struct {
	cap        *capability.Capability
	log        *slog.Logger
	builtins   map[string]*plugin
	loadPlugin PluginLoader
	gen        atomic.Pointer[generation]

	loadMu sync.Mutex // serialises Load and Reload; guards loaded
	status atomic.Pointer[LoadStatus]
	loaded map[string]*plugin // third-party plugins in use, by declaration

	obs         Observer
	subjectObs  SubjectObserver // obs, when it listens per subject
	leaseObs    LeaseObserver   // obs, when it listens to client leases
	deny        *local.DenyCache
	local       *local.Limiters
	localInUse  atomic.Bool   // local limiters decided since Redis last answered
	clusterSize atomic.Int64  // live ruled instances, as last seen in Redis
	degradedLog *lograte.Gate // rate-limits "decision degraded" warnings, per rule
	warnLog     *lograte.Gate // rate-limits the other warnings a request can set off, per message and rule
	leases      *leases
	leaseKey    leaseKey         // the fleet's lease key, cached
	timeout     time.Duration    // DecisionTimeout
	now         func() time.Time // Options.Now
	noShortcuts bool             // Options.NoShortcuts
}

// ErrNoRule is the error of an operation on a rule the serving set lacks.
var ErrNoRule = errors.New("host: no rule")

// LoadStatus describes the serving rule set and the last load attempt.
type LoadStatus struct {
	// Path is where the serving rules were loaded from.
	Path string
	// Rules is the number of serving rules.
	Rules int
	// LoadedAt is when the serving set was loaded.
	LoadedAt time.Time
	// LastError is the error of the last failed load, if the last load
	// failed; the previous set kept serving.
	LastError error
	// LastErrorAt is when that load failed.
	LastErrorAt time.Time
	// Loads and Failures count load attempts that succeeded and failed.
	Loads, Failures int64
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

// PluginLoader loads a third-party plugin that rule files declare under
// plugins: (a Wasm module or a process). The algorithm may implement
// Close(context.Context) error, called once no serving rule uses it.
type PluginLoader func(ctx context.Context, decl rules.PluginDecl) (sdk.Algorithm, error)

// NewEngine registers the plugins' scripts with the capability and returns
// an engine with an empty rule set.
func NewEngine(o Options) (*Engine, error) {
	if o.Capability == nil {
		return nil, errors.New("host: engine needs a capability")
	}
	e := &Engine{degradedLog: lograte.NewGate(gatedLogEvery), warnLog: lograte.NewGate(gatedLogEvery), cap: o.Capability, log: o.Logger, builtins: map[string]*plugin{}, loadPlugin: o.LoadPlugin, loaded: map[string]*plugin{},
		deny: local.NewDenyCache(o.DenyCacheSize, o.Now), local: local.NewLimiters(local.MaxLimiters), obs: o.Observer, leases: newLeases(), now: o.Now}
	if e.now == nil {
		e.now = time.Now
	}
	if e.obs == nil {
		e.obs = nopObserver{}
	}
	e.subjectObs, _ = e.obs.(SubjectObserver)
	e.leaseObs, _ = e.obs.(LeaseObserver)
	e.timeout, e.noShortcuts = o.DecisionTimeout, o.NoShortcuts
	if e.timeout <= 0 {
		e.timeout = DecisionTimeoutCalls * o.Capability.Timeout()
	}
	e.clusterSize.Store(1)
	if e.log == nil {
		e.log = slog.Default()
	}
	for _, alg := range o.Plugins {
		info := alg.Info()
		if _, dup := e.builtins[info.Name]; dup {
			return nil, fmt.Errorf("host: plugin %q registered twice", info.Name)
		}
		reg, err := o.Capability.Register(info.Name, info.Scripts)
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

// Lookup implements rules.Catalog over the serving generation's plugins.
func (e *Engine) Lookup(name string) (sdk.Algorithm, bool) { return e.gen.Load().Lookup(name) }

// Load compiles the rule files at path and, only if they are valid, makes
// them the serving set. On error the old set keeps serving; the error is a
// rules.ErrorList with every problem and its position.
func (e *Engine) Load(path string) (*rules.Set, error) {
	return e.LoadContext(context.Background(), path)
}

// ReadTimeout bounds how long a load waits for the rule files to be read:
// a file that blocks on read (a FIFO nobody writes) fails the load, and
// the old set keeps serving, instead of holding up every later load and
// Close.
const ReadTimeout = 10 * time.Second

// LoadContext is Load, reading the rule files within ctx and ReadTimeout.
// They are read before the engine is locked: a read that never ends is
// left behind, and later loads and Close do not wait for it.
func (e *Engine) LoadContext(ctx context.Context, path string) (*rules.Set, error) {
	files, perr := parseRules(ctx, path)
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	st := *e.status.Load()
	g, err := e.compile(files, perr)
	if err != nil {
		st.LastError, st.LastErrorAt = err, time.Now()
		st.Failures++
		e.status.Store(&st)
		e.obs.Reload(err, len(e.gen.Load().set.Rules()))
		return nil, err
	}
	old := e.gen.Swap(g)
	e.release(old, g)
	e.deny.Clear() // limits may have changed
	// Leases belong to the old rules: give their unused permits back.
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.cap.Timeout())
	e.ReturnLeases(ctx)
	cancel()
	st = LoadStatus{Path: path, Rules: len(g.set.Rules()), LoadedAt: time.Now(), Loads: st.Loads + 1, Failures: st.Failures}
	e.status.Store(&st)
	e.obs.Reload(nil, len(g.set.Rules()))
	return g.set, nil
}

// parseRules parses the rule files at path (rules.Parse) within ctx and
// ReadTimeout. On time-out the read goes on in the background, and its
// result is dropped.
func parseRules(ctx context.Context, path string) (*rules.Files, error) {
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	type parsed struct {
		files *rules.Files
		err   error
	}
	done := make(chan parsed, 1)
	go func() {
		files, err := rules.Parse(path)
		done <- parsed{files, err}
	}()
	select {
	case p := <-done:
		return p.files, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("host: reading the rule files at %s: %w (does a file block on read, a FIFO?)", path, context.Cause(ctx))
	}
}

// compile takes the parsed rule files (rules.Parse's results), loads the
// third-party plugins they declare (reusing those already loaded), and compiles the rules against
// them. On error, plugins loaded for this attempt alone are released.
func (e *Engine) compile(files *rules.Files, err error) (*generation, error) {
	if files == nil {
		return nil, err
	}
	g := &generation{engine: e, plugins: make(map[string]*plugin, len(e.builtins))}
	for name, p := range e.builtins {
		g.plugins[name] = p
	}
	loadErrs := LoadDeclared(files.Plugins(), func(name string) bool { _, ok := e.builtins[name]; return ok },
		func(decl rules.PluginDecl) error {
			p, err := e.thirdParty(decl)
			if err == nil {
				g.plugins[decl.Name] = p
			}
			return err
		})
	set, err := rules.Compile(files, g)
	if err != nil || len(loadErrs) > 0 {
		e.release(g, e.gen.Load())
		return nil, rules.Merge(err, loadErrs)
	}
	g.set = set
	return g, nil
}

// LoadDeclared calls load for every plugin decls declare, in order, and
// returns a positioned error for each that takes a built-in's name or does
// not load. The engine and `ruled check` load rule files' plugins with it.
func LoadDeclared(decls []rules.PluginDecl, builtin func(name string) bool, load func(rules.PluginDecl) error) rules.ErrorList {
	var errs rules.ErrorList
	for _, d := range decls {
		err := errors.New("the name of a built-in plugin")
		if !builtin(d.Name) {
			err = load(d)
		}
		if err != nil {
			errs = append(errs, &rules.Error{Pos: d.Pos, Code: rules.CodePluginLoad, Message: fmt.Sprintf("plugin %q: %v", d.Name, err)})
		}
	}
	return errs
}

// pluginKey identifies a loaded plugin: the same declaration (name, file,
// pin) of a file with the same content (digest) reuses the loaded plugin
// across reloads; a file that changed on disk is loaded again.
func pluginKey(d rules.PluginDecl, digest string) string {
	return d.Name + "\x00" + d.Wasm + "\x00" + d.Process + "\x00" + d.SHA256 + "\x00" + digest
}

// PluginFile returns the file a plugin declaration names and the most
// bytes ruled reads of it (pluginfile.MaxWasm or MaxExecutable).
func PluginFile(d rules.PluginDecl) (path string, maxSize int64) {
	if d.Process != "" {
		return d.Process, pluginfile.MaxExecutable
	}
	return d.Wasm, pluginfile.MaxWasm
}

// thirdParty returns the loaded plugin for decl, loading it if needed. The
// file is hashed at every load (a regular file within its size cap, read
// through a limited reader): a file that no longer matches its pin fails
// the load here, even when the plugin loaded from it before still runs,
// and a file whose content changed is loaded again.
func (e *Engine) thirdParty(decl rules.PluginDecl) (*plugin, error) {
	if e.loadPlugin == nil {
		return nil, errors.New("this ruled cannot load third-party plugins")
	}
	path, maxSize := PluginFile(decl)
	digest, err := pluginfile.Digest(path, maxSize)
	if err != nil {
		return nil, err
	}
	if err := pluginfile.CheckPin(path, decl.SHA256, digest); err != nil {
		return nil, err
	}
	key := pluginKey(decl, digest)
	if p, ok := e.loaded[key]; ok {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alg, err := e.loadPlugin(ctx, decl)
	if err != nil {
		return nil, err
	}
	reg, err := e.cap.Register(decl.Name, alg.Info().Scripts)
	if err != nil {
		ClosePlugin(alg, e.log)
		return nil, err
	}
	p := &plugin{alg: alg, reg: reg, key: key}
	e.loaded[key] = p
	e.log.Info("plugin started", startedAttrs(decl, alg.Info().Version)...)
	return p, nil
}

// startedAttrs are the attributes of a "plugin started" line: the plugin's
// name, its file (wasm or process, whichever it has) and its version when
// it says one. Attributes that do not apply are left out, not logged empty.
func startedAttrs(decl rules.PluginDecl, version string) []any {
	attrs := []any{"plugin", decl.Name}
	if decl.Wasm != "" {
		attrs = append(attrs, "wasm", decl.Wasm)
	}
	if decl.Process != "" {
		attrs = append(attrs, "process", decl.Process)
	}
	if version != "" {
		attrs = append(attrs, "version", version)
	}
	return attrs
}

// release closes the third-party plugins of from that keep is not using.
// Checks still running on from finish first: a plugin's Close must let
// in-flight calls end (drivers close their instances as calls return).
func (e *Engine) release(from, keep *generation) {
	if from == nil {
		return
	}
	for name, p := range from.plugins {
		if p.key == "" {
			continue
		}
		if kp, ok := keep.plugins[name]; ok && kp == p {
			continue
		}
		if e.loaded[p.key] != p {
			continue
		}
		delete(e.loaded, p.key)
		ClosePlugin(p.alg, e.log)
		e.log.Info("plugin stopped", "plugin", name)
	}
}

// ClosePlugin stops a third-party plugin (one that has Close), logging a
// failure, within 10 seconds.
func ClosePlugin(alg sdk.Algorithm, log *slog.Logger) {
	if c, ok := alg.(interface{ Close(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			log.Warn("closing plugin", "plugin", alg.Info().Name, "err", err)
		}
	}
}

// Close returns leased permits and stops every third-party plugin.
func (e *Engine) Close(ctx context.Context) {
	e.ReturnLeases(ctx)
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	e.release(e.gen.Load(), &generation{})
}

// Reload loads the rules again from the path of the last successful Load
// and returns the number of serving rules.
func (e *Engine) Reload() (int, error) { return e.ReloadContext(context.Background()) }

// ReloadContext is Reload, reading the rule files within ctx and
// ReadTimeout.
func (e *Engine) ReloadContext(ctx context.Context) (int, error) {
	path := e.status.Load().Path
	if path == "" {
		return 0, errors.New("host: no rules loaded yet")
	}
	set, err := e.LoadContext(ctx, path)
	if err != nil {
		return 0, err
	}
	return len(set.Rules()), nil
}

// Status returns the state of the serving rule set and the last load.
func (e *Engine) Status() LoadStatus { return *e.status.Load() }

// Reset forgets everything a rule's plugin stores for one subject, and
// this instance's cached denial of it, so that the subject starts afresh. It returns the number of keys removed.
func (e *Engine) Reset(ctx context.Context, rule, subject string) (int64, error) {
	g := e.gen.Load()
	r, ok := g.set.Rule(rule)
	if !ok {
		return 0, fmt.Errorf("%w %q", ErrNoRule, rule)
	}
	if r.Exempt {
		return 0, nil // an exempt rule stores nothing
	}
	// The subject starts afresh here too: no cached denial outlives it.
	e.deny.Forget(local.Key{Rule: rule, Subject: subject})
	return g.plugins[r.Plugin].reg.Reset(ctx, rule, subject)
}

// PluginInfos returns the Info of every plugin the engine can run.
func (e *Engine) PluginInfos() []sdk.Info {
	plugins := e.gen.Load().plugins
	out := make([]sdk.Info, 0, len(plugins))
	for _, p := range plugins {
		out = append(out, p.alg.Info())
	}
	slices.SortFunc(out, func(a, b sdk.Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Rules returns the serving rule set.
func (e *Engine) Rules() *rules.Set { return e.gen.Load().set }

// Preload loads every plugin's scripts into Redis, so that the first
// decisions do not pay for it. Failure is not fatal: scripts load on demand.
func (e *Engine) Preload(ctx context.Context) error {
	var errs []error
	for _, p := range e.gen.Load().plugins {
		errs = append(errs, p.reg.Preload(ctx))
	}
	return errors.Join(errs...)
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

// Available reports whether Redis answered the last calls (the circuit
// breaker is closed).
func (e *Engine) Available() bool { return e.cap.Available() }

// ClusterSize returns the number of live ruled instances last seen in
// Redis (1 until a heartbeat has run).
func (e *Engine) ClusterSize() int64 { return e.clusterSize.Load() }

// DenyCacheHits returns how many requests the deny cache has denied.
func (e *Engine) DenyCacheHits() int64 { return e.deny.Hits() }

// RedisNodes returns what the capability's last probe found of each Redis
// master.
func (e *Engine) RedisNodes() []capability.NodeHealth { return e.cap.Nodes() }
