// Package wasm runs ruled plugins compiled to WebAssembly (ABI v1,
// docs/abi.md) in a wazero sandbox.
//
// Load compiles a module once (optionally caching machine code on disk),
// checks that it is a ruled plugin and imports nothing ruled does not
// provide, and returns a *Plugin that implements sdk.Algorithm: the engine
// and the conformance kit use it exactly like a native plugin. Decisions run
// on a bounded pool of pre-warmed instances, one call at a time per
// instance. Every call has a deadline and runs with no filesystem, no
// network, a memory limit, the real clock and crypto random numbers; any
// failure of guest code (a trap, a panic, running out of memory or time, a
// malformed answer) discards the instance, which is replaced, and turns into
// an error that the engine handles with the rule's on_error policy.
package wasm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/wasm/internal/meter"
	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// Defaults for Options.
const (
	// DefaultCallTimeout bounds one call into a guest. It must stay longer
	// than the capability's Redis time-out (250ms by default): a deadline
	// that expires inside a Redis call kills the instance.
	DefaultCallTimeout = time.Second
	// DefaultIdleTimeout is how long an instance beyond Options.Prewarm
	// may stay idle before the pool closes it.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMemoryLimitPages caps an instance's memory: 1024 pages of
	// 64 KiB, 64 MiB.
	DefaultMemoryLimitPages = 1024
)

// Options configure Load. The zero value is usable.
type Options struct {
	// CacheDir, when set, keeps compiled machine code on disk between runs,
	// so that a restart does not recompile (seconds for a Go module).
	CacheDir string
	// Cache, when set, is a compilation cache shared by every plugin the
	// daemon loads (it wins over CacheDir and is not closed by the plugin).
	// Share one: wazero 1.12 races when two caches on one directory are
	// created at once.
	Cache wazero.CompilationCache
	// PoolSize is the most instances of the plugin, and so the most
	// calls into it at once; more wait for a free instance. Default
	// GOMAXPROCS for a module that decides in steps (an instance is busy
	// only while guest code runs, so more instances than CPUs would only
	// hold memory), 4×GOMAXPROCS for one that blocks in redis_eval.
	PoolSize int
	// Prewarm is how many instances are created at Load and kept ready.
	// Default GOMAXPROCS, at most PoolSize.
	Prewarm int
	// IdleTimeout is how long instances beyond Prewarm may stay idle: the
	// pool creates instances when every one is busy (up to PoolSize) and
	// closes those that no call needed for a whole IdleTimeout. Default
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// CallTimeout bounds every call into the guest, its Redis calls
	// included. Default DefaultCallTimeout.
	CallTimeout time.Duration
	// MemoryLimitPages caps an instance's linear memory, in 64 KiB pages.
	// Default DefaultMemoryLimitPages.
	MemoryLimitPages uint32
	// Logger receives the plugin's log lines and the guest's stdout and
	// stderr. Default slog.Default().
	Logger *slog.Logger
	// NoTemplates starts every decision with a ruled_step call, even
	// under a config the guest answered a template for (sdk.Templater),
	// which the host otherwise expands itself without calling the guest:
	// slower, for checking that the two agree.
	NoTemplates bool

	interpreter bool      // Inspect: no machine code, a faster start
	interrupt   interrupt // tests only: another way to stop a guest
}

// interrupt is how a call past its deadline is stopped.
type interrupt int

const (
	// interruptMetered instruments the module (package meter): the guest
	// calls back every meter.Quantum loop iterations and the host aborts
	// the call there.
	interruptMetered interrupt = iota
	// interruptWazero is wazero's WithCloseOnContextDone: the guest leaves
	// machine code for Go at every loop iteration (benchmarks only, to show
	// the difference).
	interruptWazero
	// interruptNone never stops a guest (benchmarks only).
	interruptNone
)

func (o *Options) fill() {
	if o.Prewarm <= 0 {
		o.Prewarm = runtime.GOMAXPROCS(0)
	}
	// PoolSize's default depends on the module (defaultPoolSize), and so
	// does Prewarm's cap: load sets both once it has asked the module.
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = DefaultMemoryLimitPages
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Plugin is a loaded Wasm plugin. It implements sdk.Algorithm and is safe
// for concurrent use.
type Plugin struct {
	path  string
	info  sdk.Info
	opts  Options
	log   *slog.Logger
	logs  *lograte.Gate // the guest's log lines (newLogGate)
	rt    wazero.Runtime
	cache wazero.CompilationCache
	code  wazero.CompiledModule
	mcfg  wazero.ModuleConfig
	pool  *pool
	// steps: the module decides in steps (ruled_step); shapes are its
	// scripts' declared replies.
	steps  bool
	shapes sdk.ShapeOf

	nextID  atomic.Uint64
	mu      sync.RWMutex
	configs map[uint64][]byte // live configs: id -> encoded ConfigureRequest

	created, discarded, recycled, closedInstances atomic.Uint64
	maxMemory                                     atomic.Uint32
	guestSteps                                    atomic.Uint64
}

var _ sdk.Algorithm = (*Plugin)(nil)

// Load reads the module at path (a regular file of at most
// pluginfile.MaxWasm bytes), compiles it, checks it, creates Options.Prewarm
// instances and returns the plugin. The error names what is wrong: a module
// that is not a ruled ABI v1 plugin, an import ruled does not provide, an
// instance that fails to start.
func Load(ctx context.Context, path string, opts Options) (*Plugin, error) {
	bin, err := pluginfile.Read(path, pluginfile.MaxWasm)
	if err != nil {
		return nil, fmt.Errorf("wasm: %w", err)
	}
	return LoadBytes(ctx, path, bin, opts)
}

// LoadBytes is Load for a module already in memory, such as one whose
// checksum the caller verified; name stands for its path in errors.
func LoadBytes(ctx context.Context, name string, bin []byte, opts Options) (*Plugin, error) {
	p, err := load(ctx, name, bin, opts)
	if err != nil {
		return nil, fmt.Errorf("wasm: %s: %w", name, err)
	}
	return p, nil
}

// Module is what a module says about itself.
type Module struct {
	// Info is what ruled_init answers.
	Info sdk.Info
	// Steps reports whether it decides in steps (ruled_step).
	Steps bool
}

// Inspect loads the module at path just far enough to read what it says
// about itself, with wazero's interpreter (no compilation), and closes it.
func Inspect(ctx context.Context, path string) (Module, error) {
	bin, err := pluginfile.Read(path, pluginfile.MaxWasm)
	if err != nil {
		return Module{}, fmt.Errorf("wasm: %w", err)
	}
	p, err := load(ctx, path, bin, Options{PoolSize: 1, Prewarm: 1, interpreter: true})
	if err != nil {
		return Module{}, fmt.Errorf("wasm: %s: %w", path, err)
	}
	m := Module{Info: p.Info(), Steps: p.steps}
	if err := p.Close(ctx); err != nil {
		return Module{}, err
	}
	return m, nil
}

func load(ctx context.Context, path string, bin []byte, opts Options) (_ *Plugin, err error) {
	opts.fill()
	p := &Plugin{path: path, opts: opts, log: opts.Logger, logs: newLogGate(), configs: map[uint64][]byte{}}
	rc := wazero.NewRuntimeConfig()
	if opts.interpreter {
		rc = wazero.NewRuntimeConfigInterpreter()
	}
	rc = rc.WithCloseOnContextDone(opts.interrupt == interruptWazero).WithMemoryLimitPages(opts.MemoryLimitPages)
	switch {
	case opts.Cache != nil:
		rc = rc.WithCompilationCache(opts.Cache)
	case opts.CacheDir != "":
		if p.cache, err = wazero.NewCompilationCacheWithDir(opts.CacheDir); err != nil {
			return nil, fmt.Errorf("compilation cache: %w", err)
		}
		rc = rc.WithCompilationCache(p.cache)
	}
	p.rt = wazero.NewRuntimeWithConfig(ctx, rc)
	defer func() {
		if err != nil {
			_ = p.closeRuntime(ctx)
		}
	}()

	if p.code, err = compile(ctx, p.rt, bin, opts.interrupt); err != nil {
		return nil, err
	}
	if !opts.interpreter {
		// Compiling a module leaves tens of megabytes of garbage (several
		// times the module's size); return it to the OS now, once per
		// load, rather than let the daemon's RSS carry it for minutes.
		debug.FreeOSMemory()
	}

	// No filesystem, network, arguments or environment; the real clocks and
	// crypto random numbers; sleeping returns at once.
	p.mcfg = wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize").
		WithSysWalltime().WithSysNanotime().WithRandSource(rand.Reader)
	first, err := p.newInstance(ctx)
	if err != nil {
		return nil, err
	}
	if err = capability.CheckInfo(&first.info); err != nil {
		first.close()
		return nil, err
	}
	p.info, p.steps, p.shapes = first.info, first.steps, sdk.ShapesOf(first.info)
	if opts.PoolSize <= 0 {
		opts.PoolSize = defaultPoolSize(p.steps)
	}
	opts.Prewarm = min(opts.Prewarm, opts.PoolSize)
	p.opts = opts
	p.log = opts.Logger.With("plugin", p.info.Name)
	p.pool = newPool(p, opts.PoolSize)
	p.pool.add(first)
	go p.pool.trimEvery(opts.IdleTimeout)
	for range opts.Prewarm - 1 {
		in, err := p.newInstance(ctx)
		if err != nil {
			p.pool.close(ctx)
			return nil, err
		}
		p.pool.add(in)
	}
	return p, nil
}

// defaultPoolSize is Options.PoolSize's default.
func defaultPoolSize(steps bool) int {
	if steps {
		return runtime.GOMAXPROCS(0)
	}
	return 4 * runtime.GOMAXPROCS(0)
}

// Check compiles the module in bin, with wazero's interpreter, and checks
// it as Load does before any instance exists (docs/abi.md: a ruled ABI v1
// plugin that imports nothing ruled does not provide), without creating an
// instance: no guest code runs, so the module's Info and its configs are not
// checked. name stands for its path in errors.
func Check(ctx context.Context, name string, bin []byte) error {
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer func() { _ = rt.Close(ctx) }()
	if _, err := compile(ctx, rt, bin, interruptMetered); err != nil {
		return fmt.Errorf("wasm: %s: %w", name, err)
	}
	return nil
}

// compile instantiates the host modules a plugin may import in rt (WASI,
// ruled's and, with interruptMetered, the meter's), compiles the module in
// bin (instrumented for the meter) and checks its imports and exports.
func compile(ctx context.Context, rt wazero.Runtime, bin []byte, how interrupt) (wazero.CompiledModule, error) {
	wasi, err := wasi_snapshot_preview1.NewBuilder(rt).Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("WASI: %w", err)
	}
	if _, err = rt.InstantiateModule(ctx, wasi, wazero.NewModuleConfig()); err != nil {
		return nil, fmt.Errorf("WASI: %w", err)
	}
	ruled, err := hostModule(rt).Compile(ctx)
	if err != nil {
		return nil, fmt.Errorf("host functions: %w", err)
	}
	if _, err = rt.InstantiateModule(ctx, ruled, wazero.NewModuleConfig()); err != nil {
		return nil, fmt.Errorf("host functions: %w", err)
	}
	var metered wazero.CompiledModule
	if how == interruptMetered {
		if bin, err = meter.Instrument(bin); err != nil {
			return nil, fmt.Errorf("instrumenting for time-outs: %w", err)
		}
		if metered, err = meterModule(rt).Compile(ctx); err != nil {
			return nil, fmt.Errorf("host functions: %w", err)
		}
		if _, err = rt.InstantiateModule(ctx, metered, wazero.NewModuleConfig()); err != nil {
			return nil, fmt.Errorf("host functions: %w", err)
		}
	}
	code, err := compileModule(ctx, rt, bin)
	if err != nil {
		return nil, fmt.Errorf("compiling: %w", err)
	}
	if err = checkModule(code, wasi, ruled, metered); err != nil {
		return nil, err
	}
	return code, nil
}

// compileModule is rt.CompileModule, with a panic in wazero made an
// error: a malformed module its validator misses (wazero v1.12.0 indexes
// out of range on some) must not take the daemon down.
func compileModule(ctx context.Context, rt wazero.Runtime, bin []byte) (code wazero.CompiledModule, err error) {
	defer func() {
		if p := recover(); p != nil {
			code, err = nil, fmt.Errorf("wazero failed on a malformed module: %v", p)
		}
	}()
	return rt.CompileModule(ctx, bin)
}

// Info implements sdk.Algorithm with what the module's ruled_init answered.
func (p *Plugin) Info() sdk.Info { return capability.CloneInfo(p.info) }

// Steps reports whether the module decides in steps (ABI ruled_step): the
// driver then runs each script call itself, holding no instance while
// Redis answers.
func (p *Plugin) Steps() bool { return p.steps }

// Path returns the file the plugin was loaded from (the name given to
// LoadBytes).
func (p *Plugin) Path() string { return p.path }

// config is the sdk.Config the host hands out: an id the guest knows the
// parsed config by. The pointer to the plugin keeps it out of the tiny
// allocator, so that its cleanup runs.
type config struct {
	p        *Plugin
	id       uint64
	template *sdk.Step // the guest's template for the config, nil when none
}

// Configure implements sdk.Algorithm. The guest validates raw; the host
// keeps it under a fresh id and replays it on every instance that has not
// seen it. The config is forgotten when the engine drops the returned value.
func (p *Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	id := p.nextID.Add(1)
	msg, err := (&abi.ConfigureRequest{ConfigID: id, Config: raw}).Append(nil)
	if err != nil {
		return nil, fmt.Errorf("wasm plugin %s: %w", p.info.Name, err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), p.opts.CallTimeout)
	in, err := p.pool.get(wctx)
	cancel()
	if err != nil {
		return nil, p.errorf("configure", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.CallTimeout)
	resp, err := in.configure(ctx, id, msg)
	cancel()
	p.pool.put(in)
	if err != nil {
		return nil, err
	}
	if err := abi.ConfigError(resp.Errors); err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.configs[id] = msg
	p.mu.Unlock()
	c := &config{p: p, id: id}
	if p.steps && !p.opts.NoTemplates {
		c.template = resp.Template
	}
	runtime.AddCleanup(c, p.forget, id)
	return c, nil
}

// forget drops a config the engine no longer holds. Instances that have
// seen many forgotten configs are recycled (pool.put).
func (p *Plugin) forget(id uint64) {
	p.mu.Lock()
	delete(p.configs, id)
	p.mu.Unlock()
}

// liveConfigs returns the number of configs in use.
func (p *Plugin) liveConfigs() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return len(p.configs)
}

// configMessage returns the encoded ConfigureRequest of a live config.
func (p *Plugin) configMessage(id uint64) ([]byte, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	msg, ok := p.configs[id]
	return msg, ok
}

// Decide implements sdk.Algorithm. h is the capability the guest's Eval
// calls go to. The call runs with a deadline of Options.CallTimeout; waiting
// for a free instance is bounded by the same time-out.
func (p *Plugin) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	cfg, ok := c.(*config)
	if !ok || cfg.p != p {
		return sdk.Decision{}, fmt.Errorf("wasm plugin %s: config of type %T is not one of this plugin's", p.info.Name, c)
	}
	if p.steps {
		d, err := sdk.DecideSteps(ctx, h, (*stepper)(p), p.shapes, c, r)
		runtime.KeepAlive(cfg) // its cleanup would forget the config
		return d, err
	}
	in, err := p.acquire(ctx, "decide")
	if err != nil {
		return sdk.Decision{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	d, err := in.decide(cctx, h, cfg.id, &r)
	cancel()
	p.pool.put(in)
	runtime.KeepAlive(cfg) // its cleanup would forget the config
	return d, err
}

// acquire takes an instance from the pool for a call named what, waiting
// at most Options.CallTimeout for one.
func (p *Plugin) acquire(ctx context.Context, what string) (*instance, error) {
	if err := ctx.Err(); err != nil {
		// A call with a done context would only kill an instance.
		return nil, p.errorf(what, err)
	}
	in, err := p.pool.tryGet()
	if in == nil && err == nil {
		wctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
		in, err = p.pool.get(wctx)
		cancel()
	}
	if err != nil {
		return nil, p.errorf(what, err)
	}
	if err := ctx.Err(); err != nil { // done while a new instance started
		p.pool.put(in)
		return nil, p.errorf(what, err)
	}
	return in, nil
}

// stepper runs a module's steps for sdk.DecideSteps: each step takes an
// instance for one ruled_step call and gives it back before the host runs
// the step's script, so no instance waits on Redis.
type stepper Plugin

// Start implements sdk.Steps: the config's template expanded for r when
// the guest answered one, else a first ruled_step.
func (s *stepper) Start(ctx context.Context, c sdk.Config, r sdk.Request) (sdk.Step, error) {
	cfg := c.(*config)
	if cfg.template != nil {
		return sdk.Expand(*cfg.template, r), nil
	}
	req := abi.StartStep(cfg.id, r)
	return (*Plugin)(s).step(ctx, &req)
}

// Resume implements sdk.Steps with a ruled_step that carries the reply.
func (s *stepper) Resume(ctx context.Context, c sdk.Config, r sdk.Request, step sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	req := abi.ResumeStep(c.(*config).id, r, step, reply)
	return (*Plugin)(s).step(ctx, &req)
}

// step runs one ruled_step on a pooled instance.
func (p *Plugin) step(ctx context.Context, req *abi.StepRequest) (sdk.Step, error) {
	in, err := p.acquire(ctx, "step")
	if err != nil {
		return sdk.Step{}, err
	}
	p.guestSteps.Add(1)
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	s, err := in.step(cctx, req)
	cancel()
	p.pool.put(in)
	return s, err
}

func (p *Plugin) errorf(what string, err error) error {
	return fmt.Errorf("wasm plugin %s: %s: %w", p.info.Name, what, err)
}

// Stats describe a plugin's instances, for metrics and tests.
type Stats struct {
	// Instances is the number of live instances, busy or idle.
	Instances int
	// Idle is the number of instances ready for a call.
	Idle int
	// Created counts instances over the plugin's life; Discarded those
	// closed after a failed call, Recycled those closed because they held
	// many configs no longer in use.
	Created, Discarded, Recycled uint64
	// Trimmed counts instances closed because no call needed them for
	// Options.IdleTimeout.
	Trimmed uint64
	// GuestSteps counts ruled_step calls: none for a decision started
	// from a config's template.
	GuestSteps uint64
	// Configs is the number of configs in use.
	Configs int
	// MaxMemory is the largest linear memory, in bytes, any instance has
	// had after a call.
	MaxMemory uint32
}

// Stats returns the plugin's current statistics.
func (p *Plugin) Stats() Stats {
	closed := p.closedInstances.Load() // first: never more than created
	created := p.created.Load()
	return Stats{Instances: int(created - closed), Idle: p.pool.idleCount(), Created: created, Trimmed: p.pool.trimmed.Load(),
		Discarded: p.discarded.Load(), Recycled: p.recycled.Load(), Configs: p.liveConfigs(), MaxMemory: p.maxMemory.Load(),
		GuestSteps: p.guestSteps.Load()}
}

// Close waits, until ctx is done, for calls in progress to finish, then
// closes every instance and releases the compiled code. Decisions after
// Close fail.
func (p *Plugin) Close(ctx context.Context) error {
	p.pool.close(ctx)
	return p.closeRuntime(ctx)
}

func (p *Plugin) closeRuntime(ctx context.Context) error {
	err := p.rt.Close(ctx)
	if p.cache != nil {
		err = errors.Join(err, p.cache.Close(ctx))
	}
	if err != nil {
		return fmt.Errorf("wasm plugin %s: close: %w", p.info.Name, err)
	}
	return nil
}

// CallError is a failed call into guest code: a trap, a panic, an exit
// (the Go runtime exits when it runs out of memory), the deadline, or an
// answer that breaks the ABI. The instance that failed has been discarded.
type CallError struct {
	// Plugin is the plugin's name.
	Plugin string
	// Func is the export that was called.
	Func string
	// Err is what happened. errors.Is(err, context.DeadlineExceeded) holds
	// when the call ran out of time.
	Err error
	// Detail is what the guest last reported on its error log or stderr
	// during the call (a panic message, a runtime error), if anything.
	Detail string
}

// Error describes the failure, with the guest's detail if any.
func (e *CallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "wasm plugin %s: %s: %v", e.Plugin, e.Func, e.Err)
	if e.Detail != "" {
		fmt.Fprintf(&b, " (guest: %s)", e.Detail)
	}
	return b.String()
}

// Unwrap returns Err.
func (e *CallError) Unwrap() error { return e.Err }
