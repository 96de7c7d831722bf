// Package process runs ruled plugins as separate processes, with
// hashicorp/go-plugin over gRPC (docs/plugins.md, "Process plugins").
//
// Load starts the plugin executable (checking its SHA-256 first when the
// rule file pins one, and again at every restart), shakes hands (protocol
// version 1 and a magic cookie, gRPC only, automatic mutual TLS), and
// returns a *Plugin that implements sdk.Algorithm: the engine and the
// conformance kit use it exactly like a native plugin. The plugin reaches
// Redis only through ruled: while it decides, its Host calls come back over
// one persistent go-plugin broker connection and run through the sdk.Host
// the engine passed to Decide, so namespacing, ACL users and time-outs are
// those of a native plugin.
//
// Every call has a deadline (Options.CallTimeout). A plugin that exits,
// crashes, stops answering its health checks or times out several calls in
// a row is killed and restarted in the background with exponential
// backoff, and the live configs are sent to the new process. While it is
// down, Decide fails at once with an error wrapping ErrDown, and the engine
// applies the rule's on_error policy. Close stops the process; on Linux the
// kernel also kills it if ruled dies.
package process

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// Defaults for Options.
const (
	// DefaultCallTimeout bounds one call into the plugin, its Redis calls
	// included. It must stay longer than the capability's Redis time-out
	// (250ms by default), so that a slow Redis shows as a Redis error.
	DefaultCallTimeout = time.Second
	// DefaultStartTimeout bounds starting the process: the handshake and
	// Init.
	DefaultStartTimeout = 10 * time.Second
	// DefaultRestartBackoff is the wait before the first restart; it doubles
	// with every failed attempt.
	DefaultRestartBackoff = 100 * time.Millisecond
	// DefaultMaxRestartBackoff caps the wait between restarts.
	DefaultMaxRestartBackoff = 10 * time.Second
	// DefaultHealthInterval is how often a running plugin is health-checked.
	DefaultHealthInterval = time.Second
	// DefaultHungAfter is how many calls in a row may time out before the
	// process is taken as hung and restarted.
	DefaultHungAfter = 3
)

// Errors a decision can wrap.
var (
	// ErrDown: the plugin process is not running; ruled is restarting it.
	ErrDown = errors.New("plugin process is down")
	// ErrClosed: the plugin was closed.
	ErrClosed = errors.New("plugin is closed")
)

// Options configure Load. The zero value is usable.
type Options struct {
	// SHA256, when set, is the executable's expected SHA-256 digest in hex.
	// Load refuses a file whose digest differs, and so does every restart.
	SHA256 string
	// CallTimeout bounds every call into the plugin. Default
	// DefaultCallTimeout.
	CallTimeout time.Duration
	// StartTimeout bounds starting a process, handshake and Init included.
	// Default DefaultStartTimeout.
	StartTimeout time.Duration
	// RestartBackoff is the wait before the first restart of a plugin that
	// failed; it doubles with each failed attempt up to MaxRestartBackoff,
	// and starts again from RestartBackoff once a process has run for
	// MaxRestartBackoff. Defaults DefaultRestartBackoff and
	// DefaultMaxRestartBackoff.
	RestartBackoff, MaxRestartBackoff time.Duration
	// HealthInterval is how often a running process is health-checked.
	// Default DefaultHealthInterval.
	HealthInterval time.Duration
	// HungAfter is how many calls in a row may exceed CallTimeout before the
	// process is restarted. Default DefaultHungAfter.
	HungAfter int
	// Env is the plugin's whole environment, as KEY=value. The plugin does
	// not inherit ruled's (which may hold Redis credentials or the admin
	// token).
	Env []string
	// Logger receives the plugin's log lines, its stdout and stderr, and the
	// driver's own messages. Default slog.Default().
	Logger *slog.Logger
	// NoTemplates sends every decision's first step to the process, even
	// under a config the process answered a template for (sdk.Templater),
	// which ruled otherwise expands itself: slower, for checking that the
	// two agree.
	NoTemplates bool
}

func (o *Options) fill() {
	if o.CallTimeout <= 0 {
		o.CallTimeout = DefaultCallTimeout
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = DefaultRestartBackoff
	}
	if o.MaxRestartBackoff <= 0 {
		o.MaxRestartBackoff = DefaultMaxRestartBackoff
	}
	o.MaxRestartBackoff = max(o.MaxRestartBackoff, o.RestartBackoff)
	if o.HealthInterval <= 0 {
		o.HealthInterval = DefaultHealthInterval
	}
	if o.HungAfter <= 0 {
		o.HungAfter = DefaultHungAfter
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Plugin is a plugin running as a separate process. It implements
// sdk.Algorithm and is safe for concurrent use.
type Plugin struct {
	path     string
	opts     Options
	checksum []byte // pinned SHA-256, or nil
	info     sdk.Info
	steps    bool        // the process decides in steps: Steps, not Decide
	shapes   sdk.ShapeOf // its scripts' declared replies
	logs     *logSink
	hostSvc  *hostService

	inst     atomic.Pointer[instance] // the running process; nil while down
	calls    callTable
	nextCall atomic.Uint64
	nextCfg  atomic.Uint64
	inflight atomic.Int64
	closed   atomic.Bool
	restarts atomic.Uint64
	// hostEvals counts the process's Eval calls back to ruled;
	// processSteps the steps sent to it (none for a decision started from
	// a config's template).
	hostEvals, processSteps atomic.Uint64

	// cfgMu orders Configure (readers) against the replay of configs to a
	// restarted process (the writer), so that no config is missed.
	cfgMu sync.RWMutex

	mu        sync.Mutex
	configs   map[uint64]*abipb.ConfigureRequest // live configs, by id
	forgotten []uint64                           // ids to tell the process to drop
	downErr   error                              // why the plugin is down
	dead      *instance                          // marked down, not stopped yet

	wake      chan struct{} // to the supervisor: the plugin went down
	closing   chan struct{}
	done      chan struct{} // the supervisor has stopped every process
	closeOnce sync.Once
}

var _ sdk.Algorithm = (*Plugin)(nil)

// Load starts the plugin executable at path and returns the plugin once it
// has answered Init. The error says what went wrong: a digest that does not
// match the pin (naming both), a file that is not a ruled process plugin, a
// process that did not start or answer in time.
func Load(ctx context.Context, path string, opts Options) (*Plugin, error) {
	opts.fill()
	abs, checksum, err := checkFile(path, opts.SHA256)
	if err != nil {
		return nil, err
	}
	p := &Plugin{path: abs, opts: opts, logs: newLogSink(opts.Logger.With("process", abs)),
		configs: map[uint64]*abipb.ConfigureRequest{}, calls: callTable{m: map[uint64]*call{}},
		wake: make(chan struct{}, 1), closing: make(chan struct{}), done: make(chan struct{}),
		checksum: checksum}
	p.hostSvc = &hostService{p: p}
	in, err := p.start(ctx)
	if err != nil {
		return nil, fmt.Errorf("process: %s: %w", path, err)
	}
	if err := capability.CheckInfo(&in.info); err != nil {
		in.stop(stopGrace)
		return nil, fmt.Errorf("process: %s: %w", path, err)
	}
	p.info, p.steps, p.shapes = in.info, in.stepper != nil, sdk.ShapesOf(in.info)
	p.logs.setLogger(opts.Logger.With("plugin", p.info.Name))
	p.inst.Store(in)
	go p.supervise()
	return p, nil
}

// Check checks the executable at path as Load does before it starts it,
// and starts nothing: the file exists, is a regular executable file within
// pluginfile.MaxExecutable bytes and,
// when pin is set, has that SHA-256 digest (hex). It cannot tell whether
// the file is a ruled plugin: only running it can.
func Check(path, pin string) error {
	_, _, err := checkFile(path, pin)
	return err
}

// checkFile does Check's checks and returns the absolute path and the
// pinned digest (nil without a pin).
func checkFile(path, pin string) (abs string, checksum []byte, err error) {
	if abs, err = filepath.Abs(path); err != nil {
		return "", nil, fmt.Errorf("process: %w", err)
	}
	st, err := pluginfile.Stat(abs, pluginfile.MaxExecutable)
	if err != nil {
		return "", nil, fmt.Errorf("process: %w", err)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return "", nil, fmt.Errorf("process: %s: not an executable file", path)
	}
	if pin != "" {
		if checksum, err = checkDigest(abs, pin); err != nil {
			return "", nil, fmt.Errorf("process: %w", err)
		}
	}
	return abs, checksum, nil
}

// checkDigest compares the file's SHA-256 with want (hex) and returns the
// pinned digest.
func checkDigest(path, want string) ([]byte, error) {
	pin, err := hex.DecodeString(want)
	if err != nil || len(pin) != sha256.Size {
		return nil, fmt.Errorf("%s: sha256 pin %q: want 64 hexadecimal digits", path, want)
	}
	got, err := pluginfile.Digest(path, pluginfile.MaxExecutable)
	if err != nil {
		return nil, err
	}
	if err := pluginfile.CheckPin(path, hex.EncodeToString(pin), got); err != nil {
		return nil, err
	}
	return pin, nil
}

// sameInfo reports whether a restarted process describes itself as the
// first one did: the scripts registered with the capability are its, and
// the traits the loaded rules were compiled with (the engine's shortcuts)
// still hold. The scripts and each script's commands are compared as sets,
// in any order: a plugin may well list them from a map.
func sameInfo(a, b *sdk.Info) bool {
	if a.Name != b.Name || a.Version != b.Version || a.Traits != b.Traits {
		return false
	}
	as, bs := scriptSet(a.Scripts), scriptSet(b.Scripts)
	if as == nil || bs == nil || len(as) != len(bs) {
		return false
	}
	for name, x := range as {
		y, ok := bs[name]
		if !ok || x.Source != y.Source || !slices.Equal(x.Commands, y.Commands) || returns(x) != returns(y) {
			return false
		}
	}
	return true
}

// returns is a script's declared reply, as text ("" when none).
func returns(s sdk.Script) string {
	if s.Returns == nil {
		return ""
	}
	return s.Returns.String()
}

// scriptSet indexes scripts by name, each with its commands sorted and
// without repeats; nil when a name repeats.
func scriptSet(scripts []sdk.Script) map[string]sdk.Script {
	set := make(map[string]sdk.Script, len(scripts))
	for _, s := range scripts {
		if _, dup := set[s.Name]; dup {
			return nil
		}
		s.Commands = slices.Compact(slices.Sorted(slices.Values(s.Commands)))
		set[s.Name] = s
	}
	return set
}

// Info implements sdk.Algorithm with what the process answered to Init.
func (p *Plugin) Info() sdk.Info { return capability.CloneInfo(p.info) }

// Steps reports whether the process decides in steps on its steps socket: ruled
// then runs each script call itself, and the process never calls back.
func (p *Plugin) Steps() bool { return p.steps }

// HostEvals returns how many Eval calls the process has made back to ruled
// (through the Host service): none for a plugin that decides in steps.
func (p *Plugin) HostEvals() uint64 { return p.hostEvals.Load() }

// StepsSent returns how many steps were sent to the process: none for a
// decision started from a config's template (sdk.Templater).
func (p *Plugin) StepsSent() uint64 { return p.processSteps.Load() }

// Path returns the absolute path of the executable.
func (p *Plugin) Path() string { return p.path }

// PID returns the process id of the running plugin process, or 0 while it
// is down.
func (p *Plugin) PID() int {
	if in := p.inst.Load(); in != nil {
		return in.pid
	}
	return 0
}

// Restarts returns how many times the process has been restarted.
func (p *Plugin) Restarts() uint64 { return p.restarts.Load() }

// Status implements host.StatusReporter: nil while the process runs, else
// why it cannot decide.
func (p *Plugin) Status() error {
	if p.closed.Load() {
		return ErrClosed
	}
	if p.inst.Load() == nil {
		return p.downError()
	}
	return nil
}

func (p *Plugin) downError() error {
	p.mu.Lock()
	cause := p.downErr
	p.mu.Unlock()
	if p.inst.Load() != nil { // came back meanwhile
		return fmt.Errorf("process plugin %s: %w (restarted since)", p.info.Name, ErrDown)
	}
	return fmt.Errorf("process plugin %s: %w, restarting (%v)", p.info.Name, ErrDown, cause)
}

// config is the sdk.Config the host hands out: an id the process knows the
// parsed config by. The pointer to the plugin keeps it out of the tiny
// allocator, so that its cleanup runs.
type config struct {
	p        *Plugin
	id       uint64
	template *sdk.Step // the process's template for the config, nil when none
}

// Configure implements sdk.Algorithm. The process validates raw and keeps
// it under a fresh id; ruled keeps it too, and sends it again to a
// restarted process. The config is forgotten when the engine drops the
// returned value. Configure fails while the process is down.
func (p *Plugin) Configure(raw map[string]any) (sdk.Config, error) {
	id := p.nextCfg.Add(1)
	msg, err := pluginrpc.ConfigureToPB(id, raw)
	if err != nil {
		return nil, fmt.Errorf("process plugin %s: %w", p.info.Name, err)
	}
	if p.closed.Load() {
		return nil, fmt.Errorf("process plugin %s: %w", p.info.Name, ErrClosed)
	}
	p.cfgMu.RLock()
	defer p.cfgMu.RUnlock()
	in := p.inst.Load()
	if in == nil {
		return nil, p.downError()
	}
	p.mu.Lock()
	forget := p.forgotten
	p.forgotten = nil
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), p.opts.CallTimeout)
	resp, err := in.rpc.Configure(ctx, &pluginpb.ConfigureRequest{Configure: msg, Forget: forget})
	cancel()
	if err != nil {
		p.mu.Lock()
		p.forgotten = append(p.forgotten, forget...)
		p.mu.Unlock()
		return nil, p.callFailed(context.Background(), in, "configure", err)
	}
	if err := abi.ConfigError(resp.GetErrors()); err != nil {
		return nil, err
	}
	answer, err := pluginrpc.ConfigureResponseFromPB(resp)
	if err != nil {
		return nil, fmt.Errorf("process plugin %s: configure: %w", p.info.Name, err)
	}
	p.mu.Lock()
	p.configs[id] = msg
	p.mu.Unlock()
	c := &config{p: p, id: id}
	if p.steps && !p.opts.NoTemplates {
		c.template = answer.Template
	}
	runtime.AddCleanup(c, p.forget, id)
	return c, nil
}

// forget drops a config the engine no longer holds; the process hears of it
// with the next Configure.
func (p *Plugin) forget(id uint64) {
	p.mu.Lock()
	if _, ok := p.configs[id]; ok {
		delete(p.configs, id)
		p.forgotten = append(p.forgotten, id)
	}
	p.mu.Unlock()
}

// Decide implements sdk.Algorithm. h is the capability the plugin's Host
// calls go to. The call runs with a deadline of Options.CallTimeout; while
// the process is down it fails at once.
func (p *Plugin) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	cfg, ok := c.(*config)
	if !ok || cfg.p != p {
		return sdk.Decision{}, fmt.Errorf("process plugin %s: config of type %T is not one of this plugin's", p.info.Name, c)
	}
	p.inflight.Add(1)
	defer p.inflight.Add(-1)
	if p.closed.Load() {
		return sdk.Decision{}, fmt.Errorf("process plugin %s: %w", p.info.Name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return sdk.Decision{}, fmt.Errorf("process plugin %s: decide: %w", p.info.Name, err)
	}
	if p.steps {
		d, err := sdk.DecideSteps(ctx, h, (*stepper)(p), p.shapes, c, r)
		runtime.KeepAlive(cfg) // its cleanup would forget the config
		return d, err
	}
	in := p.inst.Load()
	if in == nil {
		return sdk.Decision{}, p.downError()
	}
	id := p.nextCall.Add(1)
	cl := &call{host: h}
	p.calls.put(id, cl)
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	resp, err := in.rpc.Decide(cctx, &pluginpb.DecideRequest{CallId: id, Decide: pluginrpc.RequestToPB(cfg.id, &r)})
	cancel()
	p.calls.remove(id)
	runtime.KeepAlive(cfg) // its cleanup would forget the config
	if err != nil {
		return sdk.Decision{}, p.callFailed(ctx, in, "decide", err)
	}
	in.timeouts.Store(0)
	if err := abi.AnsweredError("process", p.info.Name, resp.GetError(), resp.GetBadRequest(), cl.capErr()); err != nil {
		return sdk.Decision{}, err
	}
	return pluginrpc.DecisionFromPB(resp.GetDecision()), nil
}

// stepper runs a process's steps for sdk.DecideSteps: one frame each way on the steps socket,
// with ruled running the script calls between them.
type stepper Plugin

// Start implements sdk.Steps: the config's template expanded for r when
// the process answered one, else a first step on the steps socket.
func (s *stepper) Start(ctx context.Context, c sdk.Config, r sdk.Request) (sdk.Step, error) {
	cfg := c.(*config)
	if cfg.template != nil {
		return sdk.Expand(*cfg.template, r), nil
	}
	req := abi.StartStep(cfg.id, r)
	return (*Plugin)(s).step(ctx, &req)
}

// Resume implements sdk.Steps with a step that carries the reply.
func (s *stepper) Resume(ctx context.Context, c sdk.Config, r sdk.Request, prev sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	req := abi.ResumeStep(c.(*config).id, r, prev, reply)
	return (*Plugin)(s).step(ctx, &req)
}

// step sends one step on the steps socket and waits for its answer, bounded by Options.CallTimeout.
func (p *Plugin) step(ctx context.Context, req *abi.StepRequest) (sdk.Step, error) {
	in := p.inst.Load()
	if in == nil {
		return sdk.Step{}, p.downError()
	}
	p.processSteps.Add(1)
	cctx, cancel := context.WithTimeout(ctx, p.opts.CallTimeout)
	resp, err := in.stepper.call(cctx, req)
	cancel()
	if err != nil {
		return sdk.Step{}, p.callFailed(ctx, in, "step", err)
	}
	in.timeouts.Store(0)
	if err := abi.AnsweredError("process", p.info.Name, resp.Error, resp.BadRequest, nil); err != nil {
		return sdk.Step{}, err
	}
	return resp.Step(), nil
}

// Close lets calls in progress finish (until ctx is done), then stops the
// process. Decisions after Close fail with ErrClosed. Close is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	var err error
	p.closeOnce.Do(func() {
		p.closed.Store(true)
		for p.inflight.Load() > 0 && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		close(p.closing)
		select {
		case <-p.done:
		case <-ctx.Done():
			err = fmt.Errorf("process plugin %s: close: %w (the process is stopped in the background)", p.info.Name, ctx.Err())
		}
	})
	return err
}

// CallError is a call into the plugin process that failed: the process
// exited or crashed, the call ran out of time, or the connection broke.
type CallError struct {
	// Plugin is the plugin's name.
	Plugin string
	// Func is the call: "configure" or "decide".
	Func string
	// Err is the gRPC error.
	Err error
}

func (e *CallError) Error() string {
	return fmt.Sprintf("process plugin %s: %s: %v", e.Plugin, e.Func, e.Err)
}

// Unwrap returns Err.
func (e *CallError) Unwrap() error { return e.Err }

// call is one decision in flight: the Host its Eval and Log calls go to.
type call struct {
	host sdk.Host
	err  atomic.Pointer[error] // the last capability error of the call
}

func (c *call) capErr() error {
	if e := c.err.Load(); e != nil {
		return *e
	}
	return nil
}

// callTable routes the plugin's Host calls to the decisions in flight.
type callTable struct {
	mu sync.Mutex
	m  map[uint64]*call
}

func (t *callTable) put(id uint64, c *call) {
	t.mu.Lock()
	t.m[id] = c
	t.mu.Unlock()
}

func (t *callTable) get(id uint64) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (t *callTable) remove(id uint64) {
	t.mu.Lock()
	delete(t.m, id)
	t.mu.Unlock()
}
