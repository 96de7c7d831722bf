package capability

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultReconcileEvery is how often Reconcile re-applies every plugin's ACL
// user on every node when it is given no interval: the backstop for nodes
// that no call has visited since they lost their users (a replica that
// restarted, a node added later).
const DefaultReconcileEvery = 5 * time.Second

// repairGap is the least time between the end of a provisioning pass that
// failed and the start of the next one a call asks for, so that while the
// users cannot be set up (no ACL rights, Redis refusing) failing calls do
// not keep Redis busy with passes.
const repairGap = 200 * time.Millisecond

// provisioner keeps every registered plugin's ACL user on every Redis node.
// A pass runs ACL SETUSER for every user on every master (one pipeline per
// node) and then on every replica; passes never overlap.
type provisioner struct {
	iso     *Isolation
	client  redis.UniversalClient // the capability's own, privileged client
	log     *slog.Logger
	timeout time.Duration // bound of one pass
	newPipe func(redis.UniversalClient) redis.Scripter

	mu      sync.Mutex
	users   map[string][]string // user → ACL SETUSER arguments
	runners map[string]*runner  // user → its connection
	unknown map[string]bool     // modifiers this Redis does not know (older versions)
	flight  *flight             // the pass running now
	version int                 // bumped by add: passes set up the users of one version
	done    int                 // the version the last pass started with
	lastRun time.Time           // when the last finished pass started
	lastEnd time.Time
	lastErr error          // of the last pass; errNotProvisioned before the first
	nodeOK  map[string]int // master (nodeName) → the version a pass last set up on it
}

// runner is one plugin user's connection and what runs scripts on it.
type runner struct {
	client   redis.UniversalClient
	scripter redis.Scripter
}

// flight is a provisioning pass in progress.
type flight struct {
	done    chan struct{}
	version int
	started time.Time
	err     error
}

var errNotProvisioned = errors.New("plugin ACL users not set up yet")

func newProvisioner(iso *Isolation, client redis.UniversalClient, log *slog.Logger, timeout time.Duration,
	newPipe func(redis.UniversalClient) redis.Scripter) *provisioner {
	return &provisioner{
		iso: iso, client: client, log: log, timeout: max(4*timeout, time.Second), newPipe: newPipe,
		users: map[string][]string{}, runners: map[string]*runner{}, unknown: map[string]bool{},
		lastErr: errNotProvisioned, nodeOK: map[string]int{},
	}
}

// add records (or updates) a user's ACL SETUSER arguments and returns the
// connection that runs as that user: one per user, however often the plugin
// registers. The user is set up by the next pass.
func (pr *provisioner) add(user string, args []string) (*runner, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.users[user] = args
	pr.version++
	if r, ok := pr.runners[user]; ok {
		return r, nil
	}
	// The password is ignored (the users are nopass) but AUTH needs one.
	client, err := pr.iso.ClientAs(user, "ruled")
	if err != nil {
		return nil, fmt.Errorf("a client for ACL user %s: %w", user, err)
	}
	r := &runner{client: client, scripter: pr.newPipe(client)}
	pr.runners[user] = r
	return r, nil
}

// isolatedOn reports whether a pass set every user up on one master, as
// named by nodeName.
func (pr *provisioner) isolatedOn(node string) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	v, ok := pr.nodeOK[node]
	return ok && v >= pr.version
}

// err returns nil when the last pass set every user up on every master.
func (pr *provisioner) err() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.lastErr == nil && pr.done < pr.version {
		return errNotProvisioned
	}
	return pr.lastErr
}

// ensure makes sure a pass that started after since has run, running one
// or joining the one running, and waits for it until ctx ends. A call that
// failed passes its own start: a pass begun since then may already have
// repaired what it found, so concurrent failing calls share one pass. While
// passes fail, a new one starts at most every repairGap. force (Register,
// Reconcile) always waits for a pass that covers every user added so far.
func (pr *provisioner) ensure(ctx context.Context, since time.Time, force bool) error {
	for {
		pr.mu.Lock()
		f := pr.flight
		if f == nil {
			if !force && !pr.lastRun.Before(since) {
				err := pr.lastErr
				pr.mu.Unlock()
				return err
			}
			if !force && pr.lastErr != nil && time.Since(pr.lastEnd) < repairGap {
				err := pr.lastErr
				pr.mu.Unlock()
				return err
			}
			f = &flight{done: make(chan struct{}), version: pr.version, started: time.Now()}
			pr.flight = f
			go pr.run(f)
		}
		// A pass that began before the caller's failure, or before users
		// were added that a forced pass must cover, does not count.
		stale := f.started.Before(since) || (force && f.version < pr.version)
		pr.mu.Unlock()
		select {
		case <-f.done:
			if !stale {
				return f.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// kick starts a pass in the background unless one began after since, or
// passes fail and the last ended less than repairGap ago.
func (pr *provisioner) kick(since time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = pr.ensure(ctx, since, false)
}

// run is one pass, bounded by its own time-out rather than by the context
// of the call that asked for it: callers that give up waiting do not cut
// the repair short for the others.
func (pr *provisioner) run(f *flight) {
	ctx, cancel := context.WithTimeout(context.Background(), pr.timeout)
	defer cancel()
	err := pr.pass(ctx, f.version)
	pr.mu.Lock()
	// The last pass failed: this episode was logged already.
	failing := pr.lastErr != nil && pr.lastErr != errNotProvisioned
	pr.lastErr, pr.lastRun, pr.lastEnd, pr.flight = err, f.started, time.Now(), nil
	if err == nil {
		pr.done = f.version
	}
	var lines []string
	if err != nil && !failing && aclRightsMissing(err) {
		lines = pr.linesLocked()
	}
	pr.mu.Unlock()
	switch {
	case err != nil && !failing:
		attrs := []any{"err", err}
		if lines != nil {
			attrs = append(attrs, "run_these", lines)
		}
		pr.log.Warn("plugin isolation not in place: plugin rules follow their on_error until ruled can set up the plugins' ACL users; retrying", attrs...)
	case err == nil && failing:
		pr.log.Info("plugin isolation in place again: plugin ACL users set up on every node")
	}
	f.err = err
	close(f.done)
}

// pass sets every user up on every master, then on every replica. A replica
// that cannot be reached does not fail the pass (it serves nothing now; a
// call repairs it if it is promoted); it is logged at debug level.
func (pr *provisioner) pass(ctx context.Context, version int) error {
	provision := pr.provisionNode
	master := func(ctx context.Context, node *redis.Client) error {
		err := provision(ctx, node)
		if err == nil {
			pr.mu.Lock()
			pr.nodeOK[nodeName(node)] = version
			pr.mu.Unlock()
		}
		return err
	}
	if err := forEachMaster(ctx, pr.client, master); err != nil {
		return err
	}
	var errs []error
	if cc, ok := pr.client.(*redis.ClusterClient); ok {
		errs = append(errs, cc.ForEachSlave(ctx, provision))
	}
	if pr.iso.ExtraReplicas != nil {
		errs = append(errs, pr.iso.ExtraReplicas(ctx, provision))
	}
	if err := errors.Join(errs...); err != nil {
		pr.log.Debug("plugin ACL users not set up on a replica; a call repairs them if it is promoted", "err", err)
	}
	return nil
}

// forEachMaster calls fn with every master client serves: each of a
// Cluster's, else the client itself (standalone, or Sentinel's current
// master).
func forEachMaster(ctx context.Context, client redis.UniversalClient, fn func(context.Context, *redis.Client) error) error {
	switch c := client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, fn)
	case *redis.Client:
		return fn(ctx, c)
	}
	return fmt.Errorf("capability: unsupported Redis client %T", client)
}

// provisionNode runs every user's ACL SETUSER on one node in one pipeline.
// An older Redis lacks some connection commands (CLUSTER SHARDS came in
// 7.0): the modifier it names is dropped for good and the node tried again.
func (pr *provisioner) provisionNode(ctx context.Context, node *redis.Client) error {
	for range len(connectionCommands) + 1 {
		cmds := pr.commands()
		if len(cmds) == 0 {
			return nil
		}
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, c := range cmds {
				p.Do(ctx, c...)
			}
			return nil
		})
		if err == nil {
			return nil
		}
		bad, ok := unknownModifier(err)
		if !ok || !slices.Contains(connectionCommands, strings.TrimPrefix(bad, "+")) {
			return fmt.Errorf("ACL SETUSER: %w", err)
		}
		pr.mu.Lock()
		pr.unknown[bad] = true
		pr.mu.Unlock()
	}
	return errors.New("ACL SETUSER: too many unknown connection commands")
}

// commands returns every user's ACL SETUSER command, in a fixed order.
func (pr *provisioner) commands() [][]any {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	lines := pr.argsLocked()
	out := make([][]any, len(lines))
	for i, args := range lines {
		out[i] = make([]any, len(args))
		for j, a := range args {
			out[i][j] = a
		}
	}
	return out
}

// linesLocked returns the ACL SETUSER lines an operator would run by hand.
func (pr *provisioner) linesLocked() []string {
	var out []string
	for _, args := range pr.argsLocked() {
		out = append(out, strings.Join(args, " "))
	}
	return out
}

// argsLocked returns every user's ACL SETUSER arguments, sorted by user,
// without the modifiers this Redis does not know.
func (pr *provisioner) argsLocked() [][]string {
	users := make([]string, 0, len(pr.users))
	for u := range pr.users {
		users = append(users, u)
	}
	slices.Sort(users)
	out := make([][]string, 0, len(users))
	for _, u := range users {
		out = append(out, slices.DeleteFunc(slices.Clone(pr.users[u]), func(a string) bool { return pr.unknown[a] }))
	}
	return out
}

// aclRightsMissing reports whether ruled's own user may not run ACL SETUSER.
func aclRightsMissing(err error) bool {
	return strings.Contains(err.Error(), "NOPERM")
}

// Reconcile re-applies every plugin's ACL user on every node each interval
// (DefaultReconcileEvery when every <= 0) until ctx ends: the backstop for
// nodes that lost their users while no call went to them. Calls repair
// their own node as soon as they find their user missing; Reconcile only
// bounds how long a node that serves no call can stay without. It returns
// at once when isolation is off.
func (c *Capability) Reconcile(ctx context.Context, every time.Duration) {
	if c.acl == nil {
		return
	}
	if every <= 0 {
		every = DefaultReconcileEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = c.acl.ensure(ctx, time.Now(), true)
		}
	}
}

// IsolationErr returns nil when plugin isolation is off (Options.Isolation
// unset) or in place on every master, else why it is not: while it is not,
// plugin calls that find their user missing fail with ClassIsolation.
func (c *Capability) IsolationErr() error {
	if c.acl == nil {
		return nil
	}
	if err := c.acl.err(); err != nil {
		return fmt.Errorf("plugin isolation not in place: %w", err)
	}
	return nil
}
