// Package store owns ruled's connection to Redis.
//
// With no URL, Open starts a private redis-server on a unix socket under the
// data directory, keeps nothing on disk, restarts it with exponential backoff
// if it dies and stops it on Close ("managed" mode). With a URL it connects to
// an existing standalone server, a Sentinel-managed master or a Cluster.
//
// Every client the package builds has ContextTimeoutEnabled set, so a
// per-call context deadline bounds the whole network wait.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client time-out defaults.
const (
	// DefaultTimeout is the read and write time-out when Options.Timeout is zero.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultDialTimeout is the least dial time-out (TCP, TLS and AUTH/HELLO).
	DefaultDialTimeout = time.Second
	// DefaultStartTimeout bounds how long a managed redis-server may take to
	// answer PING after it was started.
	DefaultStartTimeout = 10 * time.Second
)

// clusterReloadInterval is how old a Cluster client's slot map may get
// before the next command reloads it (in the background). go-redis reloads
// it on MOVED or ASK, but a killed master answers nothing: with go-redis's
// default of 60 s, its slots kept going to the dead address for a minute
// after a replica had taken over (host/cluster_test.go measured it).
const clusterReloadInterval = time.Second

// Options configure Open. The zero value starts a managed redis-server.
type Options struct {
	// URL selects an external Redis. "" starts a managed local redis-server.
	// Accepted forms:
	//
	//	redis://[user:pass@]host[:port][/db][?opts]
	//	rediss://[user:pass@]host[:port][/db][?opts]              (TLS)
	//	unix://[user:pass@]/path/to/redis.sock[?db=N]
	//	redis+sentinel://[user:pass@]h1:p1,h2:p2/master[/db][?opts] (rediss+sentinel:// for TLS)
	//	redis+cluster://[user:pass@]h1:p1,h2:p2[?opts]             (rediss+cluster:// for TLS)
	//	h1:p1,h2:p2      a Cluster (two or more addresses)
	//	host[:port]      one standalone server
	//
	// opts are go-redis URL options such as dial_timeout or pool_size; they
	// win over Timeout and PoolSize. For Sentinel, user:pass authenticates to
	// the master; sentinel_username / sentinel_password to the Sentinels.
	URL string
	// DataDir is where the managed server's socket lives. "" uses a private
	// temporary directory that Close removes. Ignored with a URL.
	DataDir string
	// RedisServer is the redis-server binary for managed mode. "" looks it
	// up on PATH.
	RedisServer string
	// Timeout is the client's read and write time-out (default
	// DefaultTimeout). The dial time-out is the larger of Timeout and
	// DefaultDialTimeout.
	Timeout time.Duration
	// PoolSize is the number of connections per Redis node. 0 uses
	// DefaultPoolSize(): go-redis's own default is 10 per CPU, which queues
	// bursts of concurrent decisions behind a slow round trip.
	PoolSize int
	// StartTimeout bounds each start of the managed redis-server (default
	// DefaultStartTimeout).
	StartTimeout time.Duration
	// Logger receives the Store's log lines and the managed server's output.
	// Default slog.Default().
	Logger *slog.Logger
}

// DefaultPoolSize is the pool size used when Options.PoolSize is zero:
// 20 connections per CPU (GOMAXPROCS), at least 32. Each in-flight decision
// holds one connection for one round trip.
func DefaultPoolSize() int { return max(32, 20*runtime.GOMAXPROCS(0)) }

// Store is ruled's Redis connection, and in managed mode the redis-server
// behind it. It is safe for concurrent use.
type Store struct {
	client redis.UniversalClient
	kind   Kind
	desc   string   // external mode
	m      *managed // managed mode, else nil
	dialTO time.Duration
	ep     *endpoint // the endpoint the client was built for, to build more

	mu    sync.Mutex
	extra []redis.UniversalClient // clients of ClientAs, closed by Close

	closeOnce sync.Once
	closeErr  error
}

// Open connects to Redis as o says.
//
// In managed mode it starts redis-server and returns once it answers PING;
// ctx bounds that start only, the server then lives until Close.
//
// In external mode Open does not contact Redis: ruled must be able to start
// while Redis is down (readiness then follows the capability's probe).
// Only the URL is checked.
func Open(ctx context.Context, o Options) (*Store, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "store")
	if o.URL == "" {
		return openManaged(ctx, o, log)
	}
	ep, err := parseURL(o.URL)
	if err != nil {
		return nil, err
	}
	s := &Store{kind: ep.kind, desc: ep.desc, ep: ep}
	s.client, s.dialTO, err = newClient(ep, o)
	if err != nil {
		return nil, err
	}
	log.Info("using external Redis", "redis", s.desc)
	return s, nil
}

// timeouts returns the dial and read/write time-outs for o.
func timeouts(o Options) (dial, rw time.Duration) {
	rw = o.Timeout
	if rw <= 0 {
		rw = DefaultTimeout
	}
	return max(rw, DefaultDialTimeout), rw
}

// newClient builds the go-redis client for ep. Values set in the URL's query
// win over Options. go-redis panics on some option values (a pool size that
// does not fit an int32, say); that becomes an error.
func newClient(ep *endpoint, o Options) (c redis.UniversalClient, dialTO time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("store: creating the Redis client for %s: %v", ep.desc, r)
		}
	}()
	dial, rw := timeouts(o)
	pool := o.PoolSize
	if pool <= 0 {
		pool = DefaultPoolSize()
	}
	// apply fills in what the URL left unset and returns the dial time-out
	// in force (Ping uses it as its default bound).
	apply := func(dialTO, readTO, writeTO *time.Duration, poolSize *int, ctxTO *bool) time.Duration {
		if *dialTO == 0 {
			*dialTO = dial
		}
		if *readTO == 0 {
			*readTO = rw
		}
		if *writeTO == 0 {
			*writeTO = rw
		}
		if *poolSize == 0 {
			*poolSize = pool
		}
		*ctxTO = true
		if *dialTO > 0 {
			return *dialTO
		}
		return dial
	}
	switch ep.kind {
	case KindStandalone:
		x := ep.simple
		dialTO = apply(&x.DialTimeout, &x.ReadTimeout, &x.WriteTimeout, &x.PoolSize, &x.ContextTimeoutEnabled)
		c = redis.NewClient(x)
	case KindSentinel:
		x := ep.failover
		dialTO = apply(&x.DialTimeout, &x.ReadTimeout, &x.WriteTimeout, &x.PoolSize, &x.ContextTimeoutEnabled)
		c = redis.NewFailoverClient(x)
	case KindCluster:
		x := ep.cluster
		dialTO = apply(&x.DialTimeout, &x.ReadTimeout, &x.WriteTimeout, &x.PoolSize, &x.ContextTimeoutEnabled)
		if x.ClusterStateReloadInterval == 0 {
			x.ClusterStateReloadInterval = clusterReloadInterval
		}
		// Routing policies look COMMAND up once, under one lock for the
		// whole client. A plugin's ACL user may not run COMMAND: the
		// lookup failed and ran again for each call, so every decision
		// queued behind one slow node. Every command ruled sends names
		// its keys (one slot): routing by key is all it needs.
		x.DisableRoutingPolicies = true
		c = redis.NewClusterClient(x)
	default:
		return nil, 0, fmt.Errorf("store: unknown endpoint kind %q", ep.kind)
	}
	return c, dialTO, nil
}

// Client returns the Redis client. It stays valid until Close; in managed
// mode it reconnects by itself after the server was restarted.
func (s *Store) Client() redis.UniversalClient { return s.client }

// ClientAs returns a new client to the same Redis, with the same time-outs
// and pool size, that authenticates as user with password: the connection
// of one plugin's ACL user. The Store closes it on Close.
func (s *Store) ClientAs(user, password string) (redis.UniversalClient, error) {
	var c redis.UniversalClient
	switch s.ep.kind {
	case KindStandalone:
		cp := *s.ep.simple
		cp.Username, cp.Password = user, password
		c = redis.NewClient(&cp)
	case KindSentinel:
		cp := *s.ep.failover
		cp.Username, cp.Password = user, password
		c = redis.NewFailoverClient(&cp)
	case KindCluster:
		cp := *s.ep.cluster
		cp.Username, cp.Password = user, password
		c = redis.NewClusterClient(&cp)
	default:
		return nil, fmt.Errorf("store: no client kind for %q", s.ep.kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extra = append(s.extra, c)
	return c, nil
}

// Managed reports whether the Store runs its own redis-server.
func (s *Store) Managed() bool { return s.m != nil }

// Kind returns the kind of deployment the Store talks to.
func (s *Store) Kind() Kind { return s.kind }

// Describe says where the Store's Redis is, for logs and status pages, for
// example "managed redis-server 7.0.15 at unix:///tmp/ruled-redis-1/redis.sock"
// or "redis://127.0.0.1:6379 (standalone)". It never holds a password.
func (s *Store) Describe() string {
	if s.m != nil {
		return s.m.describe()
	}
	return s.desc
}

// Ping checks that Redis answers, naming the store in its error. Without a
// deadline in ctx it is bounded by twice the dial time-out. (ruled's
// readiness comes from capability.Probe, which asks every master.)
func (s *Store) Ping(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*s.dialTO)
		defer cancel()
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("store: ping %s: %w", s.Describe(), err)
	}
	return nil
}

// SocketPath returns the managed server's unix socket, or "" in external mode.
func (s *Store) SocketPath() string {
	if s.m == nil {
		return ""
	}
	return s.m.sock
}

// PID returns the process id of the managed redis-server, or 0 in external
// mode and after Close.
func (s *Store) PID() int {
	if s.m == nil {
		return 0
	}
	return s.m.pid()
}

// Restarts returns how many times the managed redis-server was restarted
// after dying unexpectedly.
func (s *Store) Restarts() int {
	if s.m == nil {
		return 0
	}
	return s.m.restartCount()
}

// Close closes the client. In managed mode it then stops supervision, stops
// the server (SIGTERM, SIGKILL after a grace period) and removes the
// temporary directory. Calling Close again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.m != nil {
			s.m.stopSupervision()
		}
		s.mu.Lock()
		for _, c := range s.extra {
			_ = c.Close()
		}
		s.extra = nil
		s.mu.Unlock()
		if err := s.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			errs = append(errs, fmt.Errorf("store: closing the Redis client: %w", err))
		}
		if s.m != nil {
			if err := s.m.shutdown(); err != nil {
				errs = append(errs, err)
			}
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// ForEachSentinelReplica calls fn with a client of every replica of the
// Sentinel-managed master that the first Sentinel that answers lists as up:
// a client made for the call and closed after it, with the master's
// credentials and time-outs. Other deployments have none here (a Cluster
// client lists its own replicas). It returns the errors joined; fn runs on
// one replica at a time.
func (s *Store) ForEachSentinelReplica(ctx context.Context, fn func(ctx context.Context, node *redis.Client) error) error {
	if s.kind != KindSentinel {
		return nil
	}
	addrs, err := s.sentinelReplicas(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range addrs {
		cp := *s.client.(*redis.Client).Options()
		cp.Addr, cp.Dialer, cp.OnConnect = addr, nil, nil
		c := redis.NewClient(&cp)
		if err := fn(ctx, c); err != nil {
			errs = append(errs, fmt.Errorf("replica %s: %w", addr, err))
		}
		_ = c.Close()
	}
	return errors.Join(errs...)
}

// sentinelReplicas asks the Sentinels, in turn, for the addresses of the
// master's replicas that are up.
func (s *Store) sentinelReplicas(ctx context.Context) ([]string, error) {
	fo := s.ep.failover
	var errs []error
	for _, addr := range fo.SentinelAddrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, Username: fo.SentinelUsername, Password: fo.SentinelPassword,
			TLSConfig: fo.TLSConfig, DialTimeout: s.dialTO, ReadTimeout: fo.ReadTimeout, WriteTimeout: fo.WriteTimeout,
			ContextTimeoutEnabled: true, MaxRetries: -1})
		reps, err := sc.Replicas(ctx, fo.MasterName).Result()
		_ = sc.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s: %w", addr, err))
			continue
		}
		var out []string
		for _, r := range reps {
			if strings.Contains(r["flags"], "down") || strings.Contains(r["flags"], "disconnected") {
				continue
			}
			out = append(out, net.JoinHostPort(r["ip"], r["port"]))
		}
		return out, nil
	}
	return nil, errors.Join(errs...)
}
