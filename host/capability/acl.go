package capability

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/sdk"
)

// Isolation runs each plugin's scripts as its own Redis ACL user, allowed
// its own keys (~<prefix>:<plugin>:*) and exactly the commands its scripts
// declare, so that no plugin can touch another's keys or run what it did
// not declare. Redis enforces it inside scripts.
//
// Redis keeps ACL users per node and forgets them when it restarts; a
// replica promoted by Sentinel or Cluster has only what was set on it. So
// the users are reconciled, never assumed: set up on every node when a
// plugin registers, set up again (and the call retried once) when a call
// finds its user missing, and re-applied on every node by Reconcile. A
// plugin's script never runs on the shared connection: while its user
// cannot be set up, its calls fail with ClassIsolation.
type Isolation struct {
	// ClientAs returns a client of the same Redis that authenticates as
	// user with password (host/store's Store.ClientAs).
	ClientAs func(user, password string) (redis.UniversalClient, error)
	// ExtraReplicas, when set, calls fn with a client of every replica that
	// may be promoted and that the client does not list itself: Sentinel's
	// (host/store's Store.ForEachSentinelReplica). A Cluster client lists
	// its own replicas.
	ExtraReplicas func(ctx context.Context, fn func(ctx context.Context, node *redis.Client) error) error
}

// connectionCommands are what a go-redis connection itself needs: the
// handshake, health checks and, on a Cluster, the topology and ASKING (a
// call for a slot that is migrating follows its ASK redirect with it).
// SELECT is not among them: with it a script could write its namespace in
// another database. A plugin user gets it only when ruled itself uses a
// database other than 0 (its connections must select it).
// CLIENT SETINFO is left out as well: go-redis ignores its refusal.
var connectionCommands = []string{"hello", "auth", "ping",
	"cluster|slots", "cluster|shards", "cluster|nodes", "asking", "evalsha", "eval", "time"}

// forbidden are commands a plugin may never declare: they reach beyond its
// keys or administer the server.
var forbidden = map[string]bool{
	"FLUSHALL": true, "FLUSHDB": true, "SCAN": true, "KEYS": true, "RANDOMKEY": true, "CONFIG": true,
	"ACL": true, "SCRIPT": true, "EVAL": true, "EVALSHA": true, "EVAL_RO": true, "EVALSHA_RO": true,
	"FCALL": true, "FCALL_RO": true, "FUNCTION": true, "SHUTDOWN": true, "DEBUG": true, "MODULE": true,
	"SWAPDB": true, "MIGRATE": true, "MOVE": true, "CLIENT": true, "CLUSTER": true, "REPLICAOF": true,
	"SLAVEOF": true, "SAVE": true, "BGSAVE": true, "BGREWRITEAOF": true, "MONITOR": true, "SYNC": true,
	"PSYNC": true, "FAILOVER": true, "SELECT": true, "PUBLISH": true, "SUBSCRIBE": true, "PSUBSCRIBE": true,
	"SPUBLISH": true, "SSUBSCRIBE": true, "WAIT": true, "WAITAOF": true, "OBJECT": true, "MEMORY": true,
	"INFO": true, "LATENCY": true, "SLOWLOG": true, "COMMAND": true, "DBSIZE": true, "LASTSAVE": true,
	"RESET": true, "QUIT": true, "HELLO": true, "AUTH": true,
}

// ACLUser is the Redis user a plugin's scripts run as.
func ACLUser(plugin string) string { return "ruled-plugin-" + plugin }

// CheckCommands validates the commands a plugin declares: each a Redis
// command name (or container|subcommand) that a plugin may run.
func CheckCommands(scripts []sdk.Script) error {
	for _, s := range scripts {
		for _, c := range s.Commands {
			name := strings.ToUpper(c)
			base, _, _ := strings.Cut(name, "|")
			if base == "" || strings.Trim(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZ_|") != "" {
				return fmt.Errorf("script %s: %q is not a Redis command name", s.Name, c)
			}
			if forbidden[base] {
				return fmt.Errorf("script %s: a plugin may not run %s", s.Name, base)
			}
		}
	}
	return nil
}

// ACLSetUser returns the ACL SETUSER arguments for a plugin: its own keys,
// its declared commands and what a connection needs, nothing else.
func (c *Capability) ACLSetUser(plugin string, scripts []sdk.Script) []string {
	cmds := slices.Clone(connectionCommands)
	if c.db != 0 {
		cmds = append(cmds, "select")
	}
	for _, s := range scripts {
		for _, cmd := range s.Commands {
			cmds = append(cmds, strings.ToLower(cmd))
		}
	}
	slices.Sort(cmds)
	cmds = slices.Compact(cmds)
	args := []string{"ACL", "SETUSER", ACLUser(plugin), "reset", "on", "nopass", "~" + c.prefix + ":" + plugin + ":*", "resetchannels", "-@all"}
	for _, cmd := range cmds {
		args = append(args, "+"+cmd)
	}
	return args
}

// unknownModifier returns the modifier an "Unknown command" ACL error names.
func unknownModifier(err error) (string, bool) {
	msg := err.Error()
	if !strings.Contains(msg, "Unknown command") {
		return "", false
	}
	_, rest, ok := strings.Cut(msg, "modifier '")
	if !ok {
		return "", false
	}
	mod, _, ok := strings.Cut(rest, "'")
	return mod, ok
}
