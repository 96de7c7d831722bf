package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/grpcapi"
	"github.com/ruled-dev/ruled/host/httpapi"
	"github.com/ruled-dev/ruled/host/metrics"
	"github.com/ruled-dev/ruled/host/rlqs"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/host/tracing"
	"github.com/ruled-dev/ruled/host/ui"
	"github.com/ruled-dev/ruled/internal/lograte"
)

type serveConfig struct {
	gcOwned      bool // GOGC is not set: the daemon owns the collector's target (tuneGC)
	rules        string
	listen       string
	redis        string
	dataDir      string
	redisTimeout time.Duration
	decisionTO   time.Duration
	logLevel     string
	logFormat    string
	adminToken   string
	trusted      string
	watch        bool
	pipeline     bool
	isolate      bool
	grpcListen   string
	rlqsListen   string
	rlqsShare    float64
	debugListen  string
	builtins     string
	pluginsDir   string
	tlsCert      string
	tlsKey       string
	tlsClientCA  string
	refundsFlag  string
	envoyConfigs string // envoy ratelimit config files to serve, translated
	mergeDomains bool
	xds          xdsConfig

	trustedProxies []netip.Prefix
	refunds        httpapi.Refunds

	envoy   *envoyServe    // running as envoy ratelimit; nil for ruled serve
	tracing tracing.Config // from OTEL_* (and TRACING_* as envoy ratelimit)
}

// envoyServe is what serve does differently when it runs as envoy
// ratelimit (envoymode.go).
type envoyServe struct {
	grpcOnlyTLS       bool // the TLS flags apply to the gRPC listener only
	grpcMaxAge        time.Duration
	grpcMaxAgeGrace   time.Duration
	healthNeedsConfig bool // not ready while no rule is loaded
	noRLSHeaders      bool // no RateLimit headers in RLS answers
	poolSize          int  // Redis connections per node; 0 for ruled's default
	statsd            string
	statsFlush        time.Duration
	nearLimitRatio    float64
	prometheusAddr    string
	prometheusPath    string
}

func serve(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c serveConfig
	fs := serveFlags(&c, stderr)
	if err := parseWithEnv(fs, args); err != nil {
		return 2
	}
	c.xds.useTLS = c.xds.useTLS || c.xds.tlsCA != "" || c.xds.tlsCert != ""
	if ruleOrigins(c) != 1 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "ruled serve: one of --rules PATH, --envoy-configs PATH and --xds-server ADDR is required (and no other arguments)")
		fs.Usage()
		return 2
	}
	log, err := newLogger(stderr, c.logLevel, c.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "ruled serve: %v\n", err)
		return 2
	}
	if c.tracing, err = tracing.FromEnv(os.LookupEnv); err != nil {
		fmt.Fprintf(stderr, "ruled serve: %v\n", err)
		return 2
	}
	return serveWith(ctx, c, log, stderr)
}

// serveFlags defines serve's flags on c, with their defaults: the one
// place those are written (the envoy ratelimit mode starts from them too).
func serveFlags(c *serveConfig, stderr io.Writer) *flag.FlagSet {
	fs := newFlagSet("serve", stderr)
	fs.StringVar(&c.rules, "rules", "", "rule file or directory of *.yaml (required)")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	fs.StringVar(&c.redis, "redis", "", "Redis URL: redis://, rediss://, unix://, redis+sentinel://, redis+cluster:// or host:port,host:port; empty starts a private redis-server")
	fs.StringVar(&c.dataDir, "data-dir", "", "directory for the managed redis-server's socket (default: a private temporary directory)")
	fs.DurationVar(&c.redisTimeout, "redis-timeout", capability.DefaultTimeout, "time-out of one Redis call; past it the rule's on_error applies")
	fs.DurationVar(&c.decisionTO, "decision-timeout", 0, "time-out of one check, all its rules' Redis calls together; rules reached after it follow on_error (default: twice --redis-timeout)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.adminToken, "admin-token", "", "bearer token for /v1/admin/ and the status page /ui/ (without one: reload and reset are off, and the read-only status endpoints answer loopback requests only when --listen is on loopback)")
	fs.StringVar(&c.trusted, "trusted-proxies", "127.0.0.0/8,::1/128", "comma-separated CIDRs whose X-Forwarded-*/X-Real-IP headers /v1/auth believes; empty trusts none")
	fs.BoolVar(&c.watch, "watch", true, "reload the rules when the content of a rule file, or of a plugin file they declare, changes")
	fs.BoolVar(&c.pipeline, "redis-pipeline", true, "coalesce the Redis calls of concurrent decisions into pipelines")
	fs.BoolVar(&c.isolate, "redis-acl", true, "run each plugin's scripts as its own Redis ACL user (its keys and declared commands only), never as ruled's own; without ACL SETUSER rights the lines to run are logged and plugin rules follow on_error until the users exist")
	fs.StringVar(&c.grpcListen, "grpc-listen", "", "gRPC listen address for Envoy's rate limit service (off when empty)")
	fs.StringVar(&c.rlqsListen, "rlqs-listen", "", "gRPC listen address for Envoy's rate limit quota service, RLQS (off when empty)")
	fs.Float64Var(&c.rlqsShare, "rlqs-lease-share", defaultRLQSLeaseShare, "the share of its limit a rule without lease: N lets one RLQS client hold at a time, 0 to 1 (0: such rules answer RLQS clients by their on_error)")
	fs.StringVar(&c.debugListen, "debug-listen", "", "listen address for pprof under /debug/pprof/, apart from the API (off when empty; keep it on loopback)")
	fs.StringVar(&c.builtins, "builtins", builtinsNative, "how the built-in plugins run: native (linked in) or wasm (each through the Wasm driver, from --plugins-dir)")
	fs.StringVar(&c.pluginsDir, "plugins-dir", "bin/plugins", "directory of the built-ins' Wasm modules NAME.wasm for --builtins=wasm (make plugins writes them)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM certificate chain: serve --listen and --grpc-listen over TLS (needs --tls-key; reread on SIGHUP)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM private key of --tls-cert (reread on SIGHUP)")
	fs.StringVar(&c.tlsClientCA, "tls-client-ca", "", "PEM CA bundle: require client certificates that chain to it on both listeners (needs --tls-cert; reread on SIGHUP)")
	fs.StringVar(&c.refundsFlag, "client-refunds", "allow", "which clients may give quota back (negative hits, lease returns): allow (any), admin (HTTP requests with the --admin-token; none over gRPC) or deny (none); docs/operations.md, Trust model")
	fs.StringVar(&c.envoyConfigs, "envoy-configs", "", "envoy ratelimit config file or directory of *.yaml to serve, translated as ruled import envoy does (instead of --rules)")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "merge envoy ratelimit configs of one domain, from files or xds (envoy ratelimit's MERGE_DOMAIN_CONFIG); without it a domain configured twice is refused")
	fs.StringVar(&c.xds.server, "xds-server", "", "host:port of an xDS management server whose RateLimitConfig resources to serve (ADS, state of the world; instead of --rules)")
	fs.StringVar(&c.xds.nodeID, "xds-node-id", "ruled", "the node id this instance gives the xDS server (Envoy Gateway serves envoy-ratelimit)")
	fs.StringVar(&c.xds.nodeMetadata, "xds-node-metadata", "", "the node's metadata, key=value pairs separated by commas")
	fs.BoolVar(&c.xds.useTLS, "xds-tls", false, "dial the xDS server over TLS (verified against --xds-tls-ca, else the system's CAs)")
	fs.StringVar(&c.xds.tlsCA, "xds-tls-ca", "", "PEM CA bundle that signs the xDS server's certificate (implies --xds-tls)")
	fs.StringVar(&c.xds.tlsCert, "xds-tls-cert", "", "PEM client certificate for mTLS to the xDS server (needs --xds-tls-key; implies --xds-tls)")
	fs.StringVar(&c.xds.tlsKey, "xds-tls-key", "", "PEM private key of --xds-tls-cert")
	fs.StringVar(&c.xds.serverName, "xds-tls-server-name", "", "name to verify the xDS server's certificate against (default: the host of --xds-server)")
	fs.BoolVar(&c.xds.readyUnconfigured, "xds-ready-without-config", false, "report ready before the first config arrives (serving no rules: every request allowed); by default not ready until then")
	return fs
}

// defaultRLQSLeaseShare is --rlqs-lease-share's default: one RLQS client
// holds at most a tenth of the limit of a rule without lease: N, so ten
// clients can share it to the last unit.
const defaultRLQSLeaseShare = 0.1

// serveWith checks c and serves it until ctx ends; it returns the exit
// code.
func serveWith(ctx context.Context, c serveConfig, log *slog.Logger, stderr io.Writer) int {
	if err := checkBuiltinsFlag(c.builtins); err != nil {
		fmt.Fprintf(stderr, "ruled serve: %v\n", err)
		return 2
	}
	if _, _, err := tlsFiles(c); err != nil {
		fmt.Fprintf(stderr, "ruled serve: %v\n", err)
		return 2
	}
	trusted, err := parsePrefixes(c.trusted)
	if err != nil {
		fmt.Fprintf(stderr, "ruled serve: --trusted-proxies: %v\n", err)
		return 2
	}
	c.trustedProxies = trusted
	if c.refunds, err = httpapi.ParseRefunds(c.refundsFlag); err != nil {
		fmt.Fprintf(stderr, "ruled serve: --client-refunds: %v\n", err)
		return 2
	}
	if c.refunds == httpapi.RefundsAdmin && c.adminToken == "" {
		fmt.Fprintln(stderr, "ruled serve: --client-refunds=admin needs --admin-token")
		return 2
	}
	if err := host.CheckLimitShare(c.rlqsShare); err != nil {
		fmt.Fprintf(stderr, "ruled serve: --rlqs-lease-share=%v: %v\n", c.rlqsShare, err)
		return 2
	}
	c.gcOwned = tuneGC(log, os.LookupEnv, memlimit.FromCgroup)
	redis.SetLogger(redisLogger{log})
	if err := runServer(ctx, c, log, stderr); err != nil {
		log.Error("ruled stopped", "err", err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// reportRuleErrors reports the errors of rules that refuse to serve: one
// log line each when the log is JSON, so that the stream stays JSON, else
// one plain line each, as ruled check prints them.
func reportRuleErrors(c serveConfig, log *slog.Logger, stderr io.Writer, err error) {
	if c.logFormat == "json" {
		host.LogRuleErrors(log, "rules error", err)
		return
	}
	printRuleErrors(stderr, err, "")
}

func runServer(ctx context.Context, c serveConfig, log *slog.Logger, stderr io.Writer) error {
	// Validate the rules before anything starts: a bad file refuses to serve.
	if c.rules != "" {
		if err := prevalidateRules(c.rules); err != nil {
			reportRuleErrors(c, log, stderr, err)
			return fmt.Errorf("rules in %s are invalid", c.rules)
		}
	}
	// Read the key pair before anything starts: a bad one refuses to serve.
	certs, err := loadTLS(ctx, c, log)
	if err != nil {
		return err
	}

	// Tracing: off unless the environment asks for it (docs/operations.md).
	tr, err := tracing.Start(ctx, c.tracing, version)
	if err != nil {
		return err
	}
	defer func() { // last: the spans of the final calls are sent
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(sctx); err != nil {
			log.Warn("traces not all sent at shutdown", "err", err)
		}
	}()
	if tr != nil {
		log.Info("tracing with OpenTelemetry", "protocol", c.tracing.Protocol)
	}

	m := metrics.New(metrics.Options{Version: version})
	if certs != nil {
		if err := m.TLSCertificate(func() time.Time { return certs.Leaf().NotAfter }); err != nil {
			return err
		}
	}
	pools := newWasmPools(m.RegisterPool) // every Wasm module's instances
	if c.gcOwned {
		pools.heap = newStaticHeap(ctx, log) // and static heap
	}
	wopts, closeWasmCache := wasmOptions(log, pluginCallTimeout(c.redisTimeout), c.dataDir)
	defer closeWasmCache()
	builtins, stopBuiltins, err := builtinPlugins(c.builtins, c.pluginsDir, wopts, pools)
	if err != nil {
		return err
	}
	defer stopBuiltins() // last: after the engine and the HTTP server stopped

	sopts := store.Options{URL: c.redis, DataDir: c.dataDir, Timeout: c.redisTimeout, Logger: log}
	if c.envoy != nil {
		sopts.PoolSize = c.envoy.poolSize
	}
	st, err := store.Open(ctx, sopts)
	if err != nil {
		return err
	}
	defer st.Close()
	log.Info("redis", "store", st.Describe())

	capOpts := capability.Options{Timeout: c.redisTimeout, Logger: log, Observe: m.RedisCall, OnAvailability: m.RedisAvailable,
		Tracer: tr.Tracer("github.com/ruled-dev/ruled/host/capability")}
	if c.pipeline {
		capOpts.Pipeline = redis.DefaultBlockingAutoPipelineOptions()
	}
	if c.isolate {
		capOpts.Isolation = &capability.Isolation{ClientAs: st.ClientAs, ExtraReplicas: st.ForEachSentinelReplica}
	}
	// The managed Redis is ruled's own: a script that wrote and then hangs is
	// ended by restarting it (docs/operations.md, "Script watchdog").
	capOpts.RestartUnkillable = st.Managed()
	cap := capability.New(st.Client(), capOpts)
	// Envoy ratelimit's stats to statsd, beside ruled's own metrics.
	stats, stopStats, err := startEnvoyStats(c.envoy, log)
	if err != nil {
		return err
	}
	defer stopStats() // after the engine and the listeners: the last counts are sent
	var observer host.Observer = m
	if stats != nil {
		observer = statsObserver{m, stats}
	}
	engine, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtins, PluginsLoaded: c.builtins == builtinsWasm,
		Logger: log, Observer: observer,
		Tracer:     tr.Tracer("github.com/ruled-dev/ruled/host"),
		LoadPlugin: pluginLoader(log, wopts, pools), DecisionTimeout: c.decisionTO})
	if err != nil {
		return err
	}
	defer func() { // before the store closes: returns leased permits, stops plugin processes
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		engine.Close(ctx)
	}()
	m.Bind(engine.Inspect())
	defer logPlugins(log, engine, c.builtins)()
	// The rules: files, envoy ratelimit configs, or an xDS server's. Once
	// loaded, only a valid set replaces them. The translation of envoy
	// configs goes to the stats and to /rlconfig.
	translated := &translation{stats: stats}
	rulesReady := func() error { return nil }
	watchPath := c.rules
	switch {
	case c.xds.server != "":
		xctx, stopXDS := context.WithCancel(ctx)
		defer stopXDS()
		if rulesReady, err = startXDS(xctx, c.xds, c.mergeDomains, translated.set, engine, log); err != nil {
			return err
		}
		watchPath = ""
	default:
		src := host.FileRules(c.rules)
		if c.envoyConfigs != "" {
			src, watchPath = envoyFileRules(c.envoyConfigs, c.mergeDomains, translated.set), c.envoyConfigs
		}
		set, err := engine.LoadFrom(ctx, src)
		if err != nil {
			reportRuleErrors(c, log, stderr, err)
			return fmt.Errorf("rules in %s are invalid", src.Origin)
		}
		log.Info("rules loaded", "path", src.Origin, "rules", len(set.Rules()))
	}
	if err := preloadBuiltins(engine.Rules()); err != nil {
		return err
	}
	preloadCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := engine.Preload(preloadCtx); err != nil {
		log.Warn("scripts not preloaded; they load on first use", "err", err)
	}
	// The fleet's lease key (docs/operations.md, "Trust model"): created in
	// Redis by the first instance, read by the others.
	if err := engine.ClientLeases().LoadKey(preloadCtx); err != nil {
		log.Warn("lease key not read; it is read on the first client lease", "err", err)
	}
	cancel()

	hbCtx, stopHeartbeat := context.WithCancel(context.Background())
	var background sync.WaitGroup
	// The heartbeat, and idle rule leases' quota given back for other instances.
	background.Go(func() { engine.Run(hbCtx, instanceID(), host.DefaultHeartbeat) })
	// The backstop that keeps the plugins' ACL users on every node.
	background.Go(func() { cap.Reconcile(hbCtx, capability.DefaultReconcileEvery) })
	// Health is measured, not remembered: /readyz and ruled_redis_up follow it.
	background.Go(func() { cap.Probe(hbCtx, capability.DefaultProbeEvery) })
	defer func() { stopHeartbeat(); background.Wait() }() // deregister before the store closes

	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.listen, err)
	}
	// Ready: decisions can be made normally (docs/operations.md, Health):
	// the last probe found a master answering with the plugins' ACL users
	// in place (on a Cluster, one master down fails the same subjects on
	// every instance: taking them all out of the load balancer would fail
	// the others too), calls have not found Redis unavailable for longer
	// than the breaker's cooldown with none answered since, and every
	// plugin can decide. gRPC health follows it.
	// With rules from an xDS server, ready also waits for its first config
	// unless told not to.
	ready := func(context.Context) error {
		if err := rulesReady(); err != nil {
			return err
		}
		return engine.Inspect().ReadyErr()
	}
	if c.envoy != nil && c.envoy.healthNeedsConfig {
		// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED
		inner := ready
		ready = func(ctx context.Context) error {
			if len(engine.Rules().Rules()) == 0 {
				return errors.New("no rate limit config loaded yet")
			}
			return inner(ctx)
		}
	}
	httpTLS := certs
	grpcTLS := (*tls.Config)(nil)
	if certs != nil {
		grpcTLS = certs.ServerConfig("h2")
		if c.envoy != nil && c.envoy.grpcOnlyTLS {
			httpTLS = nil // envoy ratelimit's HTTP listener is plaintext: its probes use HTTP
		}
	}
	rlqsCtx, stopRLQS := context.WithCancel(context.Background())
	defer stopRLQS()
	quota, err := rlqs.NewServer(rlqsCtx, engine.ClientLeases(), rlqs.Options{LimitShare: c.rlqsShare, Log: log})
	if err != nil {
		return err
	}
	grpcOpts := grpcOptions{addr: c.grpcListen, tls: grpcTLS, envoy: c.envoy, extra: tr.GRPC(),
		service: grpcapi.ServiceOptions{RefuseRefunds: c.refunds != httpapi.RefundsAllow, OmitHeaders: c.envoy != nil && c.envoy.noRLSHeaders,
			Observer: stats.CallObserver(), Holds: &grpcapi.Holds{Signer: engine.ClientLeases(), Releaser: engine}}}
	grpcSrv, err := startGRPC(grpcOpts, engine, ready, log)
	if err != nil {
		return err
	}
	defer grpcSrv.Stop()
	rlqsOpts := grpcOpts
	rlqsOpts.addr, rlqsOpts.rlqs = c.rlqsListen, quota
	rlqsSrv, err := startGRPC(rlqsOpts, engine, ready, log)
	if err != nil {
		return err
	}
	defer rlqsSrv.Stop()
	var handler http.Handler = httpapi.New(httpapi.Options{
		Checker:        engine,
		Ready:          ready,
		Logger:         log,
		Admin:          engine,
		Leases:         engine.ClientLeases(),
		Holds:          engine,
		AdminToken:     c.adminToken,
		TrustedProxies: c.trustedProxies,
		Refunds:        c.refunds,
		Metrics:        m.Handler(),
		UI:             ui.Handler(),
		Stats:          m.StatusFunc(st.Describe(), ready),
		LoopbackStatus: c.adminToken == "" && loopbackAddr(ln.Addr()),
	})
	if c.envoy != nil {
		handler = envoyHTTP(handler, grpcSrv.health, grpcapi.NewRateLimitService(engine, log, grpcSrv.service), log)
	}
	srv := httpapi.NewServer(tr.HTTP(handler))
	// net/http's own lines (a failed TLS handshake, a handler's panic) go
	// to the daemon's log, in its format, one of a kind every 10 s: any
	// client can set them off.
	srv.ErrorLog = slog.NewLogLogger(lograte.NewHandler(log.With("component", "http").Handler(), 10*time.Second), slog.LevelWarn)
	if httpTLS != nil {
		// Both protocols over TLS, and the same ones as net/http's default, so
		// that ALPN (from the per-handshake configuration) and the server agree.
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetHTTP2(true)
		srv.Protocols = &p
		srv.TLSConfig = httpTLS.ServerConfig("h2", "http/1.1")
	}
	served := make(chan error, 1)
	go func() {
		if httpTLS != nil {
			served <- srv.ServeTLS(ln, "", "") // the certificate comes from srv.TLSConfig
			return
		}
		served <- srv.Serve(ln)
	}()
	log.Info("ruled serving", "listen", ln.Addr().String(), "tls", httpTLS != nil, "version", version)
	logStatusPage(log, scheme(httpTLS), ln.Addr(), c.adminToken != "")
	stopMetrics, err := startEnvoyMetrics(c.envoy, m.Handler(), log)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer stopMetrics()
	var debugExtra map[string]http.Handler
	if c.envoy != nil {
		debugExtra = map[string]http.Handler{"/rlconfig": translated}
	}
	stopDebug, err := startDebug(c.debugListen, debugExtra, log)
	if err != nil {
		_ = srv.Close()
		return err
	}
	defer stopDebug()

	if c.watch && watchPath != "" {
		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		go func() {
			if err := host.WatchRules(watchCtx, engine, watchPath, nil); err != nil {
				log.Warn("rule files are not watched; reload with SIGHUP or the admin API", "err", err)
			}
		}()
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// Reloads run off this loop: a file that blocks on read never holds up
	// SIGTERM, SIGINT or the next SIGHUP.
	reloads := &hupReloads{log: log, run: func() {
		tctx, cancel := context.WithTimeout(ctx, reloadTimeout)
		reloadTLS(tctx, certs, log) // new handshakes on both listeners; open connections keep theirs
		cancel()
		_, _ = engine.Reload(ctx, "SIGHUP") // reading the rule files is bounded by host.ReadTimeout
	}}
	for {
		select {
		case <-hup:
			reloads.signal()
		case err := <-served:
			return fmt.Errorf("http server: %w", err)
		case err := <-grpcSrv.Served():
			return fmt.Errorf("grpc server: %w", err)
		case err := <-rlqsSrv.Served():
			return fmt.Errorf("rlqs server: %w", err)
		case <-ctx.Done():
			// gRPC health says NOT_SERVING first, then the listeners close.
			grpcSrv.NotServing()
			rlqsSrv.NotServing()
			stopRLQS() // RLQS streams last as long as their clients: end them
			log.Info("shutting down")
			shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http shutdown: %w", err)
			}
			return nil
		}
	}
}

// hupReloads runs the reloads SIGHUP asks for, one at a time, off the
// signal loop. A SIGHUP while one runs queues one more (several queue one)
// and says so in the log.
type hupReloads struct {
	log *slog.Logger
	run func()

	mu      sync.Mutex
	running bool
	queued  bool
}

// signal starts a reload, or queues one behind the reload in flight.
func (h *hupReloads) signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.running {
		if h.queued {
			h.log.Warn("SIGHUP during a reload still in flight; a reload is already queued after it", "reload_timeout", reloadTimeout)
		} else {
			h.log.Warn("SIGHUP during a reload still in flight; one more reload is queued after it", "reload_timeout", reloadTimeout)
		}
		h.queued = true
		return
	}
	h.running = true
	go h.loop()
}

// loop runs reloads until none is queued.
func (h *hupReloads) loop() {
	for {
		h.run()
		h.mu.Lock()
		if !h.queued {
			h.running = false
			h.mu.Unlock()
			return
		}
		h.queued = false
		h.mu.Unlock()
	}
}

// parsePrefixes parses a comma-separated list of CIDRs or addresses.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !strings.Contains(f, "/") {
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, err
			}
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// redisLogger routes go-redis's own log lines (dial failures and the like)
// into the daemon's logger at debug level; ruled logs Redis state itself.
type redisLogger struct{ log *slog.Logger }

// Printf implements go-redis's logging interface.
func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug(fmt.Sprintf(format, v...), "component", "go-redis")
}

// instanceID names this ruled instance among the live ones: host, pid and
// a random suffix, so that a restarted process counts as a new instance.
func instanceID() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%08x", h, os.Getpid(), rand.Uint32())
}
