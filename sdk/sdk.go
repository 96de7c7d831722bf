// Package sdk is what a ruled plugin author imports: the Algorithm contract,
// the Host capability a plugin decides through, and the request and decision
// types that cross the plugin boundary.
//
// A plugin never talks to Redis itself. It declares Lua scripts in Info and
// asks the Host to run them; the host owns connections, key namespaces,
// script caching, time-outs and failure policy. The same Algorithm links
// natively into ruled, builds to a Wasm module (sdk/guest) or runs as a
// separate process.
//
// A minimal plugin:
//
//	type counter struct{}
//
//	func (counter) Info() sdk.Info {
//		return sdk.Info{Name: "counter", Version: "1.0.0", Scripts: []sdk.Script{{
//			Name:     "incr",
//			Source:   `return redis.call('INCR', KEYS[1])`,
//			Commands: []string{"INCR"},
//		}}}
//	}
//
// See docs/plugins.md for the full guide.
package sdk

import (
	"context"
	"time"
)

// Algorithm is a rate-limit algorithm. Implementations must be safe for
// concurrent use: ruled calls Decide from many goroutines at once.
type Algorithm interface {
	// Info describes the plugin and declares every script it may run.
	Info() Info
	// Configure validates a rule's raw config once, at rule load, and returns
	// the parsed form that Decide receives. An error here is a load error
	// reported with the rule's position.
	Configure(raw map[string]any) (Config, error)
	// Decide answers one request for one subject, running declared scripts
	// through h. Errors are classified by the host and follow the rule's
	// on_error policy.
	Decide(ctx context.Context, h Host, c Config, r Request) (Decision, error)
}

// Config is a plugin's parsed configuration, opaque to the host.
type Config any

// Info describes a plugin.
type Info struct {
	// Name is the plugin's identifier in rule files and key namespaces:
	// lower-case letters, digits, '-' and '_'.
	Name string
	// Version is the plugin's own version, for inspection and logs.
	Version string
	// Scripts lists every Lua script the plugin may run. Host.Eval refuses
	// any script not declared here.
	Scripts []Script
	// Traits declares what the engine may assume about the plugin's
	// decisions; each trait allows one shortcut. The zero value declares
	// nothing, and every request then goes to the plugin.
	Traits Traits
}

// Traits are a plugin's promises about its decisions. The engine takes a
// shortcut (answering without the plugin) only where the plugin promised
// what makes the shortcut answer as the plugin would; docs/rules.md
// ("Shortcuts") lists which shortcut each trait allows.
type Traits struct {
	// FirmDenials promises that a denial of n hits for a subject holds for
	// every request of n or more hits until its RetryAfter has passed,
	// unless units are given back (negative hits), and that a request
	// denied changes nothing the plugin decides by later. The engine may
	// then deny such requests from an in-process cache (a rule's
	// deny_cache).
	FirmDenials bool
	// Leasable promises that one best-effort request for n hits decides as
	// n requests of one hit at the same instant would, and that a grant
	// means nothing beyond its counts (no Delay, no spacing between
	// requests). The engine may then take grants ahead in bulk and hand
	// them out in-process (a rule's lease).
	Leasable bool
	// Refunds promises that negative hits give units back. The engine then
	// returns what earlier rules granted to a request a later rule denied,
	// and leased units it did not hand out; without it, such units are
	// left to expire.
	Refunds bool
	// Releases promises that a grant of one hit with a dedup id is held
	// (a slot, not a count) until a release frees it: one negative hit
	// with the same dedup id, which gives back that grant and nothing
	// else, or nothing when it was freed before or has expired. The
	// engine then sends the releases and renewals of held grants
	// (Engine.Release, Engine.Renew: POST /v1/release and /v1/renew) to
	// the plugin; a plugin without it never sees them, so a release
	// cannot give back what a rate limit counted.
	Releases bool
}

// Names returns the declared traits by their ABI names (firm_denials,
// leasable, refunds, releases), for display.
func (t Traits) Names() []string {
	names := []string{}
	if t.FirmDenials {
		names = append(names, "firm_denials")
	}
	if t.Leasable {
		names = append(names, "leasable")
	}
	if t.Refunds {
		names = append(names, "refunds")
	}
	if t.Releases {
		names = append(names, "releases")
	}
	return names
}

// Script is a Lua script a plugin declares.
//
// The host prepends a short prelude to Source that defines
// ruled_now_us(): the current Redis time in integer microseconds (from
// TIME, or a test clock injected through the host). Scripts must take time
// from it and never from an argument.
type Script struct {
	// Name is how Decide refers to the script in Host.Eval.
	Name string
	// Source is the Lua source.
	Source string
	// Commands lists every Redis command the script calls (TIME excluded:
	// the prelude's own command is always allowed). On a Redis where ruled
	// manages ACL users the plugin may call exactly these.
	Commands []string
	// Returns declares the script's reply. The host rejects any other
	// reply (an error naming the plugin, the script and what was wrong)
	// before the plugin sees it, and decodes the decision of a step that
	// Decides with it. nil declares nothing and leaves every reply to the
	// plugin (modules built before Returns existed).
	Returns *Shape
}

// Host is the capability a plugin decides through. A Host is scoped to one
// rule and one subject: keys are relative names such as "meta" or "log",
// which the host maps into the plugin's namespace so that every key of one
// decision lands in the same Redis Cluster slot.
type Host interface {
	// Eval runs the declared script named script atomically in Redis with
	// the given relative keys and arguments, and returns its reply. It
	// never modifies keys or args, so a plugin may pass the same keys slice
	// to every call.
	Eval(ctx context.Context, script string, keys []string, args ...any) (Reply, error)
	// Log writes a message to the daemon's log, attributed to the plugin.
	Log(level Level, msg string)
}

// Level is a log level.
type Level int

// Log levels, in increasing severity.
const (
	LevelDebug Level = -4
	LevelInfo  Level = 0
	LevelWarn  Level = 4
	LevelError Level = 8
)

// Request is one question put to a plugin: may Hits units go ahead for Subject?
type Request struct {
	// Subject is the key being limited, as the rule computed it. Any bytes.
	Subject string
	// Hits is the number of units asked for. 0 peeks without consuming;
	// a negative number refunds or releases where the algorithm supports it.
	Hits int64
	// DedupID, when set, makes a retried request idempotent where the
	// algorithm supports it: the same answer, nothing consumed twice.
	DedupID string
	// BestEffort asks the algorithm to grant what is left instead of denying.
	BestEffort bool
	// Attrs are free-form request attributes the rule passes through.
	Attrs map[string]string
	// Queue says the request waits in line for its grant, asking again
	// until it is served or gives up (POST /v1/acquire with a lease id):
	// a plugin that keeps a line (the concurrency limiter) places it there
	// and serves the line in order; others ignore it.
	Queue bool
}

// Decision is a plugin's answer.
type Decision struct {
	// Allowed reports whether the request may go ahead.
	Allowed bool
	// Granted is how many units were granted (Hits, fewer under BestEffort, or 0).
	Granted int64
	// Limit is the quota that applies to the subject.
	Limit int64
	// Remaining is how many units are left after this decision.
	Remaining int64
	// Window is the period the quota applies to, for RateLimit-Policy.
	Window time.Duration
	// Reset is the time until the quota is fully available again.
	Reset time.Duration
	// RetryAfter is the time until a denied request would be allowed; 0 when allowed.
	RetryAfter time.Duration
	// Delay is how long an admitted request should wait before it proceeds
	// (shaping algorithms); 0 otherwise.
	Delay time.Duration
}
