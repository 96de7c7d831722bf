// Package capability is the Redis capability that plugins decide through.
//
// A plugin declares its Lua scripts; the capability registers them, runs them
// with EVALSHA (EVAL when Redis answers NOSCRIPT, as after a restart or
// SCRIPT FLUSH), maps the plugin's relative key names into its own namespace
// with a Cluster hash tag per subject, bounds every call with a time-out and
// classifies failures so that the engine can apply the rule's failure policy.
package capability

import (
	"context"

	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/sdk"
)

// DefaultTimeout bounds one script call when Options.Timeout is zero.
const DefaultTimeout = 250 * time.Millisecond

// DefaultPrefix is the first element of every key ruled writes.
const DefaultPrefix = "ruled"

// Options configure a Capability. The zero value is usable.
type Options struct {
	// Timeout bounds one script call, network included. Default DefaultTimeout.
	// Calls that start close together share one time-out, so a call may be
	// given up to Timeout/16 (at most 10ms) less, never more.
	Timeout time.Duration
	// Prefix is the first element of every key. Default DefaultPrefix.
	Prefix string
	// Logger receives plugin log lines. Default slog.Default().
	Logger *slog.Logger
	// Clock, when set, replaces Redis TIME inside scripts with its value in
	// microseconds. For tests only: production time always comes from Redis.
	Clock func() int64
	// HoldKeys, with Clock, makes the scripts' EXPIRE, PEXPIRE, EXPIREAT
	// and PEXPIREAT do nothing (their prelude holds holdExpiry, so their
	// SHAs differ from production's): Redis expires keys on its own clock,
	// which a test clock may leave far behind (many checks at one
	// instant), and the scripts tell stale state by the times they store.
	// The caller deletes the keys. ruled test --redis runs so.
	HoldKeys bool
	// BreakerFailures is how many consecutive calls that find Redis
	// unavailable open the circuit (default DefaultBreakerFailures).
	BreakerFailures int
	// BreakerCooldown is how long an open circuit fails calls at once
	// before one probe tries Redis again (default DefaultBreakerCooldown).
	BreakerCooldown time.Duration
	// OnAvailability, when set, is called with the first result of Probe
	// and whenever it changes: false when a master stopped answering its
	// probe, true when every master answers again. Calls do not move it.
	OnAvailability func(available bool)
	// Isolation, when set, runs each plugin's scripts as its own ACL user,
	// and never as the shared client: while a plugin's user cannot be set
	// up (Redis down, or ruled may not run ACL SETUSER: the log then shows
	// the lines to run), its calls fail with ClassIsolation.
	Isolation *Isolation
	// Pipeline coalesces the script calls of concurrent decisions into Redis
	// pipelines (go-redis autopipelining) when set. Each decision still
	// waits for its own reply; only the round trips are shared.
	Pipeline *redis.AutoPipelineOptions
	// Quarantine is how long a plugin is quarantined the first time one of
	// its scripts kept Redis busy (default DefaultQuarantine); it doubles
	// with each further time, up to MaxQuarantine. See Probe.
	Quarantine time.Duration
	// RestartUnkillable says that Redis is ruled's managed server, which
	// its supervisor starts again: a script that wrote and then kept it
	// busy, which SCRIPT KILL cannot stop, is ended with SHUTDOWN NOSAVE.
	RestartUnkillable bool
	// Observe, when set, is called after every script call with the
	// master it went to (see NodeHealth.Node; "" when unknown), its
	// duration and error (nil, or an *Error). It runs on the decision path.
	Observe func(plugin, script, node string, took time.Duration, err error)
	// Tracer, when set, gives each script call a client span, the child of
	// the span in its context (the check's); nil traces nothing.
	Tracer trace.Tracer
}

// Capability runs plugins' scripts against one Redis deployment.
// It is safe for concurrent use.
type Capability struct {
	client    redis.UniversalClient
	scripter  redis.Scripter // the client, or its autopipeliner
	timeout   time.Duration
	deadlines *deadlines // shared time-out contexts
	prefix    string
	log       *slog.Logger
	clock     func() int64
	holdKeys  bool // Options.HoldKeys
	breaker   *breaker
	health    health // what Probe found
	observe   func(plugin, script, node string, took time.Duration, err error)
	tracer    trace.Tracer // Options.Tracer; nil when off

	acl      *provisioner // nil when isolation is off
	db       int          // the database the client selects
	pipeline *redis.AutoPipelineOptions

	breakerFailures int
	breakerCooldown time.Duration
	onAvailability  func(available bool)
	nodeBreakers    sync.Map // Cluster master address → *breaker

	// The script watchdog (watchdog.go).
	running           runningCalls
	probeNow          chan struct{} // a call was answered BUSY
	quarantines       sync.Map      // plugin name → *quarantine, for every plugin registered
	byHash            sync.Map      // script SHA-1 → [plugin, script]
	quarantineFirst   time.Duration
	restartUnkillable bool
	unkillableLogged  atomic.Int64 // unix nanoseconds of the last UNKILLABLE log line
	scriptCalls       atomic.Int64 // script calls in flight (run)
}

// New returns a Capability over client.
func New(client redis.UniversalClient, opts Options) *Capability {
	c := &Capability{client: client, timeout: opts.Timeout, prefix: opts.Prefix, log: opts.Logger, clock: opts.Clock, holdKeys: opts.HoldKeys, observe: opts.Observe, tracer: opts.Tracer}
	if c.observe == nil {
		c.observe = func(string, string, string, time.Duration, error) {}
	}
	c.pipeline = opts.Pipeline
	c.probeNow = make(chan struct{}, 1)
	c.quarantineFirst, c.restartUnkillable = opts.Quarantine, opts.RestartUnkillable
	if c.quarantineFirst <= 0 {
		c.quarantineFirst = DefaultQuarantine
	}
	if c.timeout <= 0 {
		c.timeout = DefaultTimeout
	}
	c.deadlines = newDeadlines(c.timeout)
	if c.log == nil {
		c.log = slog.Default()
	}
	c.scripter = c.scripterFor(client)
	c.health = health{err: errNotProbed, nodes: map[string]*nodeHealth{}}
	if rc, ok := client.(*redis.Client); ok {
		c.db = rc.Options().DB
	}
	if opts.Isolation != nil {
		c.acl = newProvisioner(opts.Isolation, client, c.log, c.timeout, c.scripterFor)
	}
	if c.prefix == "" || strings.ContainsAny(c.prefix, "{}*?[]\\ ") {
		// Braces would move the hash tag and glob bytes would break Reset
		// and ACL key patterns.
		if c.prefix != "" {
			c.log.Warn("key prefix refused; using the default", "prefix", c.prefix, "default", DefaultPrefix)
		}
		c.prefix = DefaultPrefix
	}
	c.onAvailability = opts.OnAvailability
	c.breakerFailures, c.breakerCooldown = opts.BreakerFailures, opts.BreakerCooldown
	// One breaker for a single master; on a Cluster, one per master
	// (breakerFor), and this one only for calls whose master is unknown.
	single := ""
	if rc, ok := client.(*redis.Client); ok {
		single = nodeName(rc)
	}
	c.breaker = c.newBreaker(single)
	return c
}

// newBreaker returns a circuit breaker for one Redis node: the master's
// name (see nodeName), or "" for a Cluster's calls whose node is unknown.
func (c *Capability) newBreaker(node string) *breaker {
	b := newBreaker(c.breakerFailures, c.breakerCooldown, func(open bool) {
		attrs := []any{}
		if node != "" {
			attrs = append(attrs, "node", node)
		}
		if open {
			c.log.Warn("redis unavailable: circuit open; rules decide by their on_error policy", attrs...)
		} else {
			c.log.Info("redis available again: circuit closed", attrs...)
		}
	})
	b.node = node
	return b
}

// breakerOf returns the breaker of a master by name, or nil when no call
// went to it yet.
func (c *Capability) breakerOf(node string) *breaker {
	if _, ok := c.client.(*redis.ClusterClient); !ok {
		return c.breaker
	}
	if b, ok := c.nodeBreakers.Load(node); ok {
		return b.(*breaker)
	}
	return nil
}

// forgetNode drops the breaker of a master that left the topology (a
// failed master replaced by its replica, a node removed by re-sharding).
func (c *Capability) forgetNode(node string) { c.nodeBreakers.Delete(node) }

// nodeAnswered closes the breaker of a master that answered its probe:
// the next call goes through instead of waiting for the cooldown.
func (c *Capability) nodeAnswered(node string) {
	if b := c.breakerOf(node); b != nil && b.open() {
		b.record(false, false)
	}
}

// breakerFor returns the circuit breaker for a call on key: on a Cluster,
// the breaker of the master that owns the key's slot, so that one failed
// master does not degrade the subjects of the healthy ones.
func (c *Capability) breakerFor(ctx context.Context, key string) *breaker {
	cc, ok := c.client.(*redis.ClusterClient)
	if !ok || key == "" {
		return c.breaker
	}
	node, err := cc.MasterForKey(ctx, key)
	if err != nil {
		return c.breaker
	}
	addr := node.Options().Addr
	if b, ok := c.nodeBreakers.Load(addr); ok {
		return b.(*breaker)
	}
	b, _ := c.nodeBreakers.LoadOrStore(addr, c.newBreaker(addr))
	return b.(*breaker)
}

// reloadSlots has the capability's client and the plugin's (its ACL
// user's, when isolated) reload the Cluster slot map in the background:
// both must follow a failover, the first to pick the breaker and probe the
// masters, the second to run the scripts. No-op unless on a Cluster.
func (c *Capability) reloadSlots(plugin redis.UniversalClient) {
	for _, client := range []redis.UniversalClient{c.client, plugin} {
		if cc, ok := client.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
	}
}

// scripterFor returns what runs scripts on client: the client, or its
// autopipeliner when pipelining is on. On a Cluster the autopipeliner is
// full duplex, which keeps one pipeline per master: batches that mixed
// nodes made every decision wait for the slowest node in its batch, so
// one paused or dead master degraded the subjects of the healthy ones.
func (c *Capability) scripterFor(client redis.UniversalClient) redis.Scripter {
	if c.pipeline == nil {
		return client
	}
	type autoPipeliner interface {
		AsyncAutoPipelineWithOptions(*redis.AutoPipelineOptions) (*redis.AutoPipeliner, error)
	}
	if ap, ok := client.(autoPipeliner); ok {
		opts := c.pipeline
		if _, cluster := client.(*redis.ClusterClient); cluster {
			perNode := *opts
			perNode.FullDuplex, perNode.Unordered, perNode.MaxConcurrentBatches = true, false, 1
			opts = &perNode
		}
		p, err := ap.AsyncAutoPipelineWithOptions(opts)
		if err == nil {
			return p
		}
		c.log.Warn("autopipelining off: bad options", "err", err)
	}
	return client
}

// Available reports whether every circuit is closed: the last calls found
// Redis (every Cluster master) answering.
func (c *Capability) Available() bool {
	ok := !c.breaker.open()
	c.nodeBreakers.Range(func(_, b any) bool {
		ok = ok && !b.(*breaker).open()
		return ok
	})
	return ok
}

// Client returns the Redis client the capability runs on.
func (c *Capability) Client() redis.UniversalClient { return c.client }

// Prefix returns the first element of every key.
func (c *Capability) Prefix() string { return c.prefix }

// Timeout returns the per-call time-out.
func (c *Capability) Timeout() time.Duration { return c.timeout }

// MaxReplyBytes caps what one script call of a plugin that ruled loads
// (Register) may return: arrays count 8 bytes and 8 for each entry, strings
// their length. A larger reply is refused inside Redis (it never crosses
// the network), and the call fails with ClassRefused against the plugin:
// rate-limit decisions need a few numbers. Plugins compiled into ruled
// (RegisterNative) are not capped.
const MaxReplyBytes = 64 << 10

// preludeTime starts the scripts of a capability without Options.Clock
// (production): ruled_now_us() is Redis's TIME in microseconds, and ARGV
// is the plugin's arguments as they are.
const preludeTime = `local function ruled_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
`

// preludeClock starts them under Options.Clock instead: every call passes
// the clock's time first in ARGV (appendCall), which it takes off.
const preludeClock = `local ruled_clock = tonumber(table.remove(ARGV, 1))
local function ruled_now_us() return ruled_clock end
`

// preludeOpen opens the function that holds a capped plugin's source,
// whose reply the postlude checks.
const preludeOpen = "local function ruled_script()\n"

// holdExpiry follows the prelude in the scripts of a capability with
// Options.HoldKeys: the plugin's redis is a local that
// shadows the global one and makes EXPIRE, PEXPIRE, EXPIREAT and PEXPIREAT
// do nothing. Production scripts never carry it.
const holdExpiry = `local redis = (function(real)
  local held = {EXPIRE = true, PEXPIRE = true, EXPIREAT = true, PEXPIREAT = true}
  local function hold(f) return function(cmd, ...) if held[string.upper(cmd)] then return 1 end return f(cmd, ...) end end
  return setmetatable({call = hold(real.call), pcall = hold(real.pcall)}, {__index = real})
end)(redis)
`

// postlude closes the plugin's function, runs it and refuses a reply of
// more than MaxReplyBytes before Redis sends it.
var postlude = strings.NewReplacer("MAX", strconv.Itoa(MaxReplyBytes), "TOOLARGE",
	"redis.error_reply('TOOLARGE reply of more than "+strconv.Itoa(MaxReplyBytes)+" bytes refused by ruled')").Replace(`
end
local ruled_reply = ruled_script()
local ruled_type = type(ruled_reply)
if ruled_type == 'string' then
  if #ruled_reply > MAX then return TOOLARGE end
elseif ruled_type == 'table' then
  local n, todo, v, type = 0, nil, ruled_reply, type -- todo: nested arrays, rare
  while v do
    if v.err ~= nil then n = n + #tostring(v.err)
    elseif v.ok ~= nil then n = n + #tostring(v.ok)
    else
      local len = #v
      n = n + 8 + 8 * len -- a header, and 8 for each entry
      if n > MAX then return TOOLARGE end
      for i = 1, len do
        local x = v[i]
        local t = type(x)
        if t == 'string' then n = n + #x elseif t == 'table' then todo = todo or {}; todo[#todo + 1] = x end
      end
    end
    if n > MAX then return TOOLARGE end
    v = todo and table.remove(todo)
  end
end
return ruled_reply
`)

// Source returns the script ruled runs for a declared source of a plugin
// it loads: a first line that names it (SLOWLOG shows it, for the
// watchdog), the prelude that defines ruled_now_us(), the source as the
// body of a function, and the reply cap.
func Source(plugin, script, body string) string {
	head, end := sourceParts(plugin, script, false, false, true)
	return head + body + end
}

// NativeSource is Source for a plugin compiled into ruled: the first line,
// the prelude and the source, which returns its reply as it is.
func NativeSource(plugin, script, body string) string {
	head, end := sourceParts(plugin, script, false, false, false)
	return head + body + end
}

// sourceParts returns what goes before and after a plugin's source in the
// script ruled runs for it: preludeClock when clock is set, preludeTime
// otherwise, holdExpiry when hold is, and the reply cap when capped is.
// Uncapped sources run as the script's own body, with no function around
// them: Redis runs this for every decision.
func sourceParts(plugin, script string, clock, hold, capped bool) (head, end string) {
	prelude := preludeTime
	if clock {
		prelude = preludeClock
	}
	head = sourceTag + plugin + "/" + script + "\n" + prelude
	if hold {
		head += holdExpiry
	}
	if capped {
		return head + preludeOpen, postlude
	}
	return head, "\n"
}

// sourceTag starts the first line of every script ruled runs.
const sourceTag = "--ruled:"

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidName reports whether s may name a plugin or a rule in keys.
func ValidName(s string) bool { return nameRE.MatchString(s) }

// Plugin is one plugin's registration: its declared scripts and namespace.
type Plugin struct {
	cap     *Capability
	name    string
	ns      string // "<prefix>:<plugin>:"
	scripts map[string]*script
	log     *slog.Logger
	// scripter runs the plugin's scripts: as its own ACL user when
	// isolation is on, else the capability's shared one.
	scripter redis.Scripter
	client   redis.UniversalClient // what scripter runs on
	q        *quarantine           // shared by every registration of the name
}

// Register declares the scripts of a plugin that ruled loads (Wasm, a
// process). Names must be valid and scripts unique; each source runs as
// Source wraps it, under the reply cap.
func (c *Capability) Register(plugin string, scripts []sdk.Script) (*Plugin, error) {
	return c.register(plugin, scripts, true)
}

// RegisterNative is Register for a plugin compiled into ruled, whose code
// runs in ruled's process with its trust: each source runs as NativeSource
// wraps it, without the reply cap, which guards ruled against the plugins
// it loads and costs every call a walk over its reply.
func (c *Capability) RegisterNative(plugin string, scripts []sdk.Script) (*Plugin, error) {
	return c.register(plugin, scripts, false)
}

func (c *Capability) register(plugin string, scripts []sdk.Script, capped bool) (*Plugin, error) {
	if !ValidName(plugin) {
		return nil, fmt.Errorf("capability: plugin name %q: want lower-case letters, digits, '-' or '_' (at most 63)", plugin)
	}
	p := &Plugin{
		cap:     c,
		name:    plugin,
		ns:      c.prefix + ":" + plugin + ":",
		scripts: make(map[string]*script, len(scripts)),
		log:     c.log.With("plugin", plugin),
		q:       c.quarantineOf(plugin),
	}
	for _, s := range scripts {
		if !validKey(s.Name) {
			return nil, fmt.Errorf("capability: plugin %s: script name %q: want letters, digits, '_', '.' or '-'", plugin, s.Name)
		}
		if _, dup := p.scripts[s.Name]; dup {
			return nil, fmt.Errorf("capability: plugin %s: script %q declared twice", plugin, s.Name)
		}
		if s.Returns != nil {
			if err := s.Returns.CheckNames(); err != nil {
				return nil, fmt.Errorf("capability: plugin %s: script %q: Returns: %w", plugin, s.Name, err)
			}
		}
		head, end := sourceParts(plugin, s.Name, c.clock != nil, c.holdKeys, capped)
		src := head + s.Source + end
		rs := redis.NewScript(src)
		p.scripts[s.Name] = &script{Script: rs, src: src, hashArg: rs.Hash(), returns: s.Returns, body: s.Source,
			commands: s.Commands, headLines: strings.Count(head, "\n"), bodyLines: strings.Count(s.Source, "\n") + 1}
		c.byHash.Store(rs.Hash(), [2]string{plugin, s.Name})
	}
	if err := CheckCommands(scripts); err != nil {
		return nil, fmt.Errorf("capability: plugin %s: %w", plugin, err)
	}
	p.scripter, p.client = c.scripter, c.client
	if c.acl != nil {
		r, err := c.acl.add(ACLUser(plugin), c.ACLSetUser(plugin, scripts))
		if err != nil {
			return nil, fmt.Errorf("capability: plugin %s: %w", plugin, err)
		}
		p.scripter, p.client = r.scripter, r.client
		// Set the user up now, so that the first decisions need no
		// repair; when Redis is not there yet, calls and Reconcile do it.
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.timeout)
		_ = c.acl.ensure(ctx, time.Now(), true)
		cancel()
	}
	return p, nil
}

// Isolated reports whether the plugin's scripts run as its own ACL user and
// that user was set up on every master by the last provisioning pass.
func (p *Plugin) Isolated() bool { return p.cap.acl != nil && p.cap.acl.err() == nil }

// Name returns the plugin's name.
func (p *Plugin) Name() string { return p.name }

// Preload loads every script into Redis (on every master of a Cluster).
// Calls work without it; it saves the first EVAL of each script.
func (p *Plugin) Preload(ctx context.Context) error {
	for name, s := range p.scripts {
		if err := s.Load(ctx, p.cap.client).Err(); err != nil {
			return s.scriptErrors(name, classify(p.name, name, err))
		}
	}
	return nil
}

// Host returns the capability scoped to one rule and one subject.
func (p *Plugin) Host(rule, subject string) sdk.Host { return p.HostUntil(rule, subject, time.Time{}) }

// HostUntil is Host with a deadline that every call through it shares (a
// decision's time-out): a call waits at most the capability's time-out or
// until then, whichever comes first. The zero time sets none.
func (p *Plugin) HostUntil(rule, subject string, deadline time.Time) sdk.Host {
	return &scopedHost{p: p, rule: rule, subject: EscapeSubject(subject), deadline: deadline}
}

// scopedHost is a Plugin scoped to one rule and subject. The key prefix
// (KeyPrefix) is built with the keys of each call, in one allocation.
type scopedHost struct {
	p        *Plugin
	rule     string
	subject  string    // escaped
	deadline time.Time // shared by its calls; zero when none
}

func (h *scopedHost) Log(level sdk.Level, msg string) {
	h.p.log.Log(context.Background(), slog.Level(level), msg)
}

func (h *scopedHost) Eval(ctx context.Context, script string, keys []string, args ...any) (sdk.Reply, error) {
	return h.p.eval(ctx, h.deadline, h.rule, h.subject, script, keys, args)
}

// declared returns the script a call names, or the error that refuses the
// call: a script the plugin did not declare, a key that is not valid.
func (p *Plugin) declared(name string, keys []string) (*script, error) {
	s, ok := p.scripts[name]
	if !ok {
		return nil, &Error{Class: ClassRefused, Plugin: p.name, Script: name, Err: fmt.Errorf("script %q was not declared in Info", name)}
	}
	for _, k := range keys {
		if !validKey(k) {
			return nil, &Error{Class: ClassRefused, Plugin: p.name, Script: name, Err: fmt.Errorf("key %q: want 1-64 letters, digits, '_', '.' or '-'", k)}
		}
	}
	return s, nil
}

// callLen is the length of the command line of a call with keys and args,
// with room for the clock argument.
func callLen(keys []string, args []any) int { return 3 + len(keys) + 1 + len(args) }

// appendCall appends to call the command line of one call of s, as Redis
// receives it: EVALSHA, the script's SHA1, the number of keys, the keys
// under their prefix (fullKeys; pointers to full's elements, which must
// not change while the call runs), under Options.Clock its time now
// (preludeClock), and args.
func (p *Plugin) appendCall(call []any, s *script, full []string, args []any) []any {
	call = append(call, "evalsha", s.hashArg, len(full))
	for i := range full {
		// A pointer to the key, which go-redis writes as the string:
		// boxing the string itself would allocate a header per key.
		call = append(call, &full[i])
	}
	if p.cap.clock != nil {
		call = append(call, strconv.FormatInt(p.cap.clock(), 10))
	}
	return append(call, args...)
}

// Command returns the command line that a call of script with keys and
// args through Host(rule, subject) sends to Redis now (appendCall), or the
// error that would refuse the call. It is for tools that drive Redis as
// ruled does without the capability in between, such as bench's raw
// ceiling: they then follow the key layout and the argument list as they
// are, not as the tool's author last saw them. The script must have been
// loaded (Preload): the line is an EVALSHA.
func (p *Plugin) Command(rule, subject, script string, keys []string, args ...any) ([]any, error) {
	s, err := p.declared(script, keys)
	if err != nil {
		return nil, err
	}
	full := p.fullKeys(rule, EscapeSubject(subject), keys, nil)
	return p.appendCall(make([]any, 0, callLen(keys, args)), s, full, args), nil
}

// eval runs one script call for a rule and an escaped subject, by
// deadline when it is not zero.
func (p *Plugin) eval(ctx context.Context, deadline time.Time, rule, subject, script string, keys []string, args []any) (sdk.Reply, error) {
	if p.cap.tracer == nil {
		return p.call(ctx, deadline, rule, subject, script, keys, args)
	}
	ctx, span := p.cap.tracer.Start(ctx, "redis EVALSHA", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("db.system.name", "redis"), attribute.String("db.operation.name", "EVALSHA"),
		attribute.String("ruled.plugin", p.name), attribute.String("ruled.script", script), attribute.String("ruled.rule", rule)))
	r, err := p.call(ctx, deadline, rule, subject, script, keys, args)
	if err != nil {
		span.SetAttributes(attribute.String("ruled.error_class", string(ClassOf(err))))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	return r, err
}

// call is eval without its span.
func (p *Plugin) call(ctx context.Context, deadline time.Time, rule, subject, script string, keys []string, args []any) (sdk.Reply, error) {
	s, refused := p.declared(script, keys)
	if refused != nil {
		return sdk.Reply{}, refused
	}
	now := time.Now()
	if why := p.q.refuses(now); why != "" {
		err := &Error{Class: ClassQuarantine, Plugin: p.name, Script: script, Err: errors.New(why)}
		p.cap.observe(p.name, script, "", 0, err)
		return sdk.Reply{}, err
	}
	cb := new(callBuf)
	full := p.fullKeys(rule, subject, keys, cb.keys[:0])
	var first string
	if len(full) > 0 {
		first = full[0]
	}
	// One argument list for the whole call, as Redis receives it.
	call := cb.args[:0]
	if n := callLen(keys, args); n > len(cb.args) {
		call = make([]any, 0, n)
	}
	call = p.appendCall(call, s, full, args)

	br := p.cap.breakerFor(ctx, first)
	ok, probe := br.allow()
	if !ok {
		// A Cluster master may be failing over: keep the slot maps
		// fresh (at most one reload at a time each) so that calls move
		// to the promoted replica as soon as there is one.
		p.cap.reloadSlots(p.client)
		err := &Error{Class: ClassConnection, Plugin: p.name, Script: script, Err: ErrCircuitOpen}
		br.outage.failed(br.node, err)
		p.cap.observe(p.name, script, br.node, 0, err)
		return sdk.Reply{}, err
	}
	start := now
	caller := ctx
	ctx, cancel, callers := p.cap.bound(ctx, start, deadline, cb)
	defer cancel()
	err := caller.Err()
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		// The caller's time is spent, or it hung up: Redis was not asked.
		// Only the first is an error of the call's to count: a hang-up is
		// the client's doing.
		br.record(false, probe)
		err := &Error{Class: ClassTimeout, Plugin: p.name, Script: script, Err: err}
		if !errors.Is(err, context.Canceled) {
			p.cap.observe(p.name, script, br.node, 0, err)
		}
		return sdk.Reply{}, err
	}
	cb.running = running{plugin: p.name, script: script, node: br.node, start: start}
	p.cap.running.add(&cb.running)
	var v any
	// A call that ran out of time (its context, or the connection's
	// deadline, which can fire before the context says so) may leave its
	// script running on in Redis: it stays a suspect for the watchdog.
	defer func() { p.cap.running.end(&cb.running, err != nil && ClassOf(err) == ClassTimeout) }()
	v, err = p.cap.run(ctx, p.scripter, p.client, s, call)
	if err != nil && p.cap.acl != nil && aclDenied(err) {
		if authFailure(err) {
			// The node does not know the plugin's user (restarted,
			// promoted, added) or has a stale one, and the script did not
			// run: set the users up and try once more.
			_ = p.cap.acl.ensure(ctx, start, false)
			v, err = p.cap.run(ctx, p.scripter, p.client, s, call)
		} else {
			// Refused inside the script, which may have written before:
			// never run it twice. A stale user is set up again for the
			// next calls.
			p.cap.acl.kick(start)
		}
	}
	if err != nil && err != redis.Nil {
		// The bound context outlives a caller who hung up (bound): the
		// hang-up is the cause, whatever the call ended with.
		err = s.scriptErrors(script, classify(p.name, script, ctxFirst(caller, err)))
		if ClassOf(err) == ClassBusy {
			p.cap.nudgeWatchdog()
		}
		// Redis is unavailable when it failed within the capability's
		// time-out; not when the caller gave up or its own deadline came
		// first (a decision's time-out, shared by several calls).
		unavailable := Unavailable(err) && !errors.Is(err, context.Canceled) &&
			!(callers && errors.Is(err, context.DeadlineExceeded))
		if unavailable {
			// A master may have failed over: learn the new owners of the
			// slots now rather than at the next periodic reload.
			p.cap.reloadSlots(p.client)
		}
		br.record(unavailable, probe)
		if unavailable {
			br.outage.failed(br.node, err)
		} else if !Unavailable(err) {
			br.outage.answered() // Redis answered, with an error
		}
		p.cap.observe(p.name, script, br.node, time.Since(start), err)
		return sdk.Reply{}, err
	}
	br.record(false, probe)
	br.outage.answered()
	reply := sdk.NewReply(v)
	if s.returns != nil {
		if err := s.returns.Check(reply); err != nil {
			// Redis answered: a plugin bug, not an outage.
			err := &Error{Class: ClassScript, Plugin: p.name, Script: script, Err: fmt.Errorf("not the declared reply: %w", err)}
			p.cap.observe(p.name, script, br.node, time.Since(start), err)
			return sdk.Reply{}, err
		}
	}
	p.cap.observe(p.name, script, br.node, time.Since(start), nil)
	return reply, nil
}

// script is a declared script: go-redis's Script (EVALSHA, EVAL on
// NOSCRIPT) and its source.
type script struct {
	*redis.Script
	src string
	// hashArg is the hash boxed once, for the command line of every call.
	hashArg any
	// returns is the declared reply shape, nil when none.
	returns *sdk.Shape
	// For error messages (scripterr.go): the plugin's source and declared
	// commands, the number of lines Source puts before the source and
	// the number of lines of the source.
	body                 string
	commands             []string
	headLines, bodyLines int
}

// run runs one script call on client, or on sc, its autopipeliner, when
// pipelining is on; call is the EVALSHA command line and keys the keys in
// it. A call alone (no other script call of this Capability in flight) goes
// straight to the client: the pipeliner's writer and reader goroutines cost
// two hand-offs, which at low load wake idle CPUs, and alone it would share
// its round trip with no one. A pipelined call is submitted to the
// autopipeliner's deferred face and waited for with ctx, so the caller
// stops waiting at the deadline even though the batch itself does not
// watch ctx. Either way the call is never sent twice (scriptCmd).
func (c *Capability) run(ctx context.Context, sc redis.Scripter, client redis.UniversalClient, s *script, call []any) (any, error) {
	ap, pipelined := sc.(*redis.AutoPipeliner)
	if c.scriptCalls.Add(1) == 1 {
		pipelined = false
	}
	defer c.scriptCalls.Add(-1)
	send := func() (any, error) {
		if pipelined {
			return submit(ctx, ap, call)
		}
		cmd := scriptCmd{redis.NewCmd(ctx, call...)}
		_ = client.Process(ctx, cmd)
		v, err := cmd.Result()
		return v, ctxFirst(ctx, err)
	}
	v, err := send()
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		call[0], call[1] = "eval", s.src // the first command is done with call
		v, err = send()
	}
	return v, err
}

// ctxFirst names ctx's end as the cause of err when ctx is done or past its
// deadline: the client cuts a read at ctx's deadline as an i/o time-out,
// where the pipelined path answers ctx.Err(), and a caller's deadline must
// not count against Redis.
func ctxFirst(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cause := ContextErr(ctx)
	if cause == nil || errors.Is(err, cause) {
		return err
	}
	return fmt.Errorf("%w: %w", cause, err)
}

// ContextErr is ctx.Err(), except that it is context.DeadlineExceeded as
// soon as ctx's deadline has passed, before ctx's timer has run: a call cut
// at that deadline failed because of its caller, not of what it called.
func ContextErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// submit queues one command on the autopipeliner and waits for it.
func submit(ctx context.Context, ap *redis.AutoPipeliner, call []any) (any, error) {
	c := scriptCmd{redis.NewCmd(ctx, call...)}
	if err := ap.Submit(ctx, c).WaitContext(ctx); err != nil {
		return nil, err
	}
	return c.Result()
}

// scriptCmd is a script call. It is never sent twice: when a connection
// fails, the client (and the pipeline) sends again only the commands it
// had not yet written and fails the ones it had, which may have run.
type scriptCmd struct{ *redis.Cmd }

// NoRetry tells the pipeline not to send the call again once written.
func (scriptCmd) NoRetry() bool { return true }

// Reset deletes every key of one rule and subject (found with SCAN on the
// node that owns the subject's slot) and returns how many it deleted.
func (p *Plugin) Reset(ctx context.Context, rule, subject string) (int64, error) {
	prefix := p.KeyPrefix(rule, subject)
	// Subjects are escaped without glob characters; escape the braces' and
	// any remaining pattern bytes anyway so the pattern matches literally.
	pattern := globEscape(prefix) + "*"
	var node redis.UniversalClient = p.cap.client
	if cc, ok := p.cap.client.(*redis.ClusterClient); ok {
		c, err := cc.MasterForKey(ctx, prefix)
		if err != nil {
			return 0, classify(p.name, "reset", err)
		}
		node = c
	}
	var deleted int64
	iter := node.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		n, err := node.Del(ctx, iter.Val()).Result()
		if err != nil {
			return deleted, classify(p.name, "reset", err)
		}
		deleted += n
	}
	if err := iter.Err(); err != nil {
		return deleted, classify(p.name, "reset", err)
	}
	return deleted, nil
}

func globEscape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(b)
}
