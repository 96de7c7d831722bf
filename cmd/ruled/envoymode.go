package main

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/tracing"
)

// envoyRatelimit runs ruled as envoy ratelimit: configured by envoy
// ratelimit's environment variables, with its defaults, ports and paths
// (docs/envoy.md). It is `ruled envoy-ratelimit`, and what the binary does
// when it runs under the name ratelimit (an image's /bin/ratelimit).
func envoyRatelimit(ctx context.Context, args []string, lookup func(string) (string, bool), stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "ratelimit: takes no arguments: it is configured by envoy ratelimit's environment variables (docs/envoy.md)")
		return 2
	}
	s, unsupported, err := readEnvoyEnv(lookup)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: %v\n", err)
		return 2
	}
	c, err := s.serveConfig()
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: %v\n", err)
		return 2
	}
	log, err := newLogger(stderr, c.logLevel, c.logFormat)
	if err != nil {
		fmt.Fprintf(stderr, "ratelimit: %v\n", err)
		return 2
	}
	if len(unsupported) > 0 {
		log.Warn("envoy ratelimit settings that ruled does not support are set and have no effect (docs/envoy.md)", "variables", strings.Join(unsupported, ","))
	}
	log.Info("running as envoy ratelimit", "config_type", s.configType, "version", version)

	return serveWith(ctx, c, log, stderr)
}

// envoySettings are the envoy ratelimit settings ruled acts on.
type envoySettings struct {
	host, debugHost, grpcHost    string
	port, debugPort, grpcPort    int
	grpcMaxAge, grpcMaxAgeGrace  time.Duration
	grpcTLS                      bool
	grpcCert, grpcKey, grpcCA    string
	logLevel, logFormat          string
	configType                   string
	forceStart, healthyWithConf  bool
	xdsNodeID, xdsNodeMetadata   string
	xdsServer                    string
	xdsHeaders                   map[string]string
	xdsTLS                       bool
	xdsCert, xdsKey, xdsCA       string
	xdsSAN                       string
	xdsBackoff, xdsBackoffMax    time.Duration
	xdsJitter                    float64
	xdsJitterOn                  bool
	xdsMaxMsg                    int
	useStatsd                    bool
	statsdHost                   string
	statsdPort                   int
	statsFlush                   time.Duration
	disableStats                 bool
	usePrometheus                bool
	prometheusAddr, prometheusAt string
	runtimeRoot, runtimeSub      string
	runtimeApp                   string
	runtimeIgnoreDot             bool
	runtimeWatchRoot             bool
	nearLimitRatio               float64
	redisSocket, redisType       string
	redisURL, redisAuth          string
	redisTLS                     bool
	redisPool                    int
	redisTimeout                 time.Duration
	mergeDomains                 bool
	responseHeaders              bool
	tracing                      bool
	tracingName, tracingProtocol string
	tracingNamespace             string
	tracingInstance              string
	tracingRate                  float64
	otel                         tracing.Config // what the OTEL_* variables say
	rlqsListen                   string         // ruledVars': envoy ratelimit has no RLQS
	rlqsShare                    float64
}

// envoyVar is one of envoy ratelimit's environment variables: its
// default there, what ruled does with it, and how ruled reads it (nil:
// ruled does not support it, and warns when it is set).
type envoyVar struct {
	name string
	def  string
	does string
	set  func(s *envoySettings, v string) error
}

// envoyVars lists every environment variable envoy ratelimit reads that
// the envoy ratelimit mode knows of. docs/envoy.md has the same table;
// TestEnvoyVarsDocumented keeps the two together.
var envoyVars = []envoyVar{
	{"HOST", "0.0.0.0", "HTTP listener (/healthcheck, /json, ruled's API)", str(func(s *envoySettings) *string { return &s.host })},
	{"PORT", "8080", "HTTP listener's port", integer(func(s *envoySettings) *int { return &s.port })},
	{"GRPC_HOST", "0.0.0.0", "gRPC listener (Envoy's RLS, gRPC health)", str(func(s *envoySettings) *string { return &s.grpcHost })},
	{"GRPC_PORT", "8081", "gRPC listener's port", integer(func(s *envoySettings) *int { return &s.grpcPort })},
	{"DEBUG_HOST", "0.0.0.0", "debug listener (pprof)", str(func(s *envoySettings) *string { return &s.debugHost })},
	{"DEBUG_PORT", "6070", "debug listener's port", integer(func(s *envoySettings) *int { return &s.debugPort })},
	{"GRPC_MAX_CONNECTION_AGE", "24h", "gRPC connections are closed (GOAWAY) after this age", duration(func(s *envoySettings) *time.Duration { return &s.grpcMaxAge })},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "1h", "time calls have to finish after that", duration(func(s *envoySettings) *time.Duration { return &s.grpcMaxAgeGrace })},
	{"GRPC_SERVER_USE_TLS", "false", "serve gRPC over TLS (the HTTP listener stays plaintext, as in envoy ratelimit)", boolean(func(s *envoySettings) *bool { return &s.grpcTLS })},
	{"GRPC_SERVER_TLS_CERT", "", "gRPC server certificate (PEM)", str(func(s *envoySettings) *string { return &s.grpcCert })},
	{"GRPC_SERVER_TLS_KEY", "", "its private key (PEM)", str(func(s *envoySettings) *string { return &s.grpcKey })},
	{"GRPC_CLIENT_TLS_CACERT", "", "require gRPC client certificates signed by this CA (mTLS)", str(func(s *envoySettings) *string { return &s.grpcCA })},
	{"GRPC_SERVER_TLS_CA_CERT", "", "the same, under the name Envoy Gateway sets (envoy ratelimit itself does not read it)", str(func(s *envoySettings) *string { return &s.grpcCA })},
	{"GRPC_CLIENT_TLS_SAN", "", "", nil},
	{"GRPC_UDS", "", "", nil},
	{"LOG_LEVEL", "WARN", "log level (trace reads as debug, fatal and panic as error)", str(func(s *envoySettings) *string { return &s.logLevel })},
	{"LOG_FORMAT", "text", "text or json", str(func(s *envoySettings) *string { return &s.logFormat })},
	{"CONFIG_TYPE", "FILE", "FILE (the RUNTIME_* directory) or GRPC_XDS_SOTW (an xDS server)", str(func(s *envoySettings) *string { return &s.configType })},
	{"FORCE_START_WITHOUT_INITIAL_CONFIG", "false", "with xDS: ready before the first config (serving no limits until then); else not ready until it arrives", boolean(func(s *envoySettings) *bool { return &s.forceStart })},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "false", "not ready while no rate limit config is loaded", boolean(func(s *envoySettings) *bool { return &s.healthyWithConf })},
	{"CONFIG_GRPC_XDS_NODE_ID", "default", "the node id given to the xDS server", str(func(s *envoySettings) *string { return &s.xdsNodeID })},
	{"CONFIG_GRPC_XDS_NODE_METADATA", "", "the node's metadata, key=value pairs separated by commas", str(func(s *envoySettings) *string { return &s.xdsNodeMetadata })},
	{"CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000", "the xDS server, host:port", str(func(s *envoySettings) *string { return &s.xdsServer })},
	{"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s", "accepted; gRPC's own reconnect schedule redials", accept},
	{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "", "gRPC metadata sent with the stream, key:value pairs separated by commas", headers(func(s *envoySettings) *map[string]string { return &s.xdsHeaders })},
	{"CONFIG_GRPC_XDS_SERVER_USE_TLS", "false", "dial the xDS server over TLS", boolean(func(s *envoySettings) *bool { return &s.xdsTLS })},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "", "client certificate for mTLS to the xDS server", str(func(s *envoySettings) *string { return &s.xdsCert })},
	{"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "", "its private key", str(func(s *envoySettings) *string { return &s.xdsKey })},
	{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "", "CA that signs the xDS server's certificate", str(func(s *envoySettings) *string { return &s.xdsCA })},
	{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "", "name the xDS server's certificate is verified against", str(func(s *envoySettings) *string { return &s.xdsSAN })},
	{"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10s", "first wait before reopening a stream that failed without a response", duration(func(s *envoySettings) *time.Duration { return &s.xdsBackoff })},
	{"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "60s", "longest such wait", duration(func(s *envoySettings) *time.Duration { return &s.xdsBackoffMax })},
	{"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.5", "the wait is randomised by ± this factor", float(func(s *envoySettings) *float64 { return &s.xdsJitter })},
	{"XDS_CLIENT_BACKOFF_JITTER", "true", "false: no randomisation", boolean(func(s *envoySettings) *bool { return &s.xdsJitterOn })},
	{"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "", "largest xDS response taken (gRPC's 4 MiB when unset)", integer(func(s *envoySettings) *int { return &s.xdsMaxMsg })},
	{"USE_STATSD", "true", "send envoy ratelimit's stats to statsd", boolean(func(s *envoySettings) *bool { return &s.useStatsd })},
	{"STATSD_HOST", "localhost", "statsd host", str(func(s *envoySettings) *string { return &s.statsdHost })},
	{"STATSD_PORT", "8125", "statsd UDP port", integer(func(s *envoySettings) *int { return &s.statsdPort })},
	{"STATS_FLUSH_INTERVAL", "10s", "how often counters are sent", duration(func(s *envoySettings) *time.Duration { return &s.statsFlush })},
	{"DISABLE_STATS", "false", "send no stats", boolean(func(s *envoySettings) *bool { return &s.disableStats })},
	{"EXTRA_TAGS", "", "", nil},
	{"USE_DOG_STATSD", "false", "", nil},
	{"USE_PROMETHEUS", "false", "serve ruled's Prometheus metrics (ruled_*, not envoy ratelimit's names) on PROMETHEUS_ADDR", boolean(func(s *envoySettings) *bool { return &s.usePrometheus })},
	{"PROMETHEUS_ADDR", ":9090", "its listen address", str(func(s *envoySettings) *string { return &s.prometheusAddr })},
	{"PROMETHEUS_PATH", "/metrics", "its path", str(func(s *envoySettings) *string { return &s.prometheusAt })},
	{"PROMETHEUS_MAPPER_YAML", "", "", nil},
	{"RUNTIME_ROOT", "/srv/runtime_data/current", "with CONFIG_TYPE=FILE, configs are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY", str(func(s *envoySettings) *string { return &s.runtimeRoot })},
	{"RUNTIME_SUBDIRECTORY", "", "see RUNTIME_ROOT", str(func(s *envoySettings) *string { return &s.runtimeSub })},
	{"RUNTIME_APPDIRECTORY", "config", "see RUNTIME_ROOT", str(func(s *envoySettings) *string { return &s.runtimeApp })},
	{"RUNTIME_IGNOREDOTFILES", "false", "accepted; ruled never reads dot files", boolean(func(s *envoySettings) *bool { return &s.runtimeIgnoreDot })},
	{"RUNTIME_WATCH_ROOT", "true", "accepted; ruled watches the config directory and follows symlink swaps of its files", boolean(func(s *envoySettings) *bool { return &s.runtimeWatchRoot })},
	{"MERGE_DOMAIN_CONFIG", "false", "merge configs of one domain instead of refusing the second", boolean(func(s *envoySettings) *bool { return &s.mergeDomains })},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "0", "accepted; ruled's deny cache (over-limit answers kept in process until the window ends) is always on", accept},
	{"NEAR_LIMIT_RATIO", "0.8", "the share of a limit past which a hit counts as near_limit in the stats", float(func(s *envoySettings) *float64 { return &s.nearLimitRatio })},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "false", "add ruled's RateLimit headers (IETF) to RLS answers", boolean(func(s *envoySettings) *bool { return &s.responseHeaders })},
	{"BACKEND_TYPE", "redis", "redis only", backend},
	{"REDIS_SOCKET_TYPE", "unix", "tcp or unix", str(func(s *envoySettings) *string { return &s.redisSocket })},
	{"REDIS_TYPE", "SINGLE", "SINGLE, SENTINEL (REDIS_URL is master,host:port,...) or CLUSTER (host:port,...)", str(func(s *envoySettings) *string { return &s.redisType })},
	{"REDIS_URL", "/var/run/nutcracker/ratelimit.sock", "the Redis address(es)", str(func(s *envoySettings) *string { return &s.redisURL })},
	{"REDIS_AUTH", "", "password, or user:password", str(func(s *envoySettings) *string { return &s.redisAuth })},
	{"REDIS_TLS", "false", "connect to Redis over TLS", boolean(func(s *envoySettings) *bool { return &s.redisTLS })},
	{"REDIS_POOL_SIZE", "10", "connections per Redis node when set; unset, ruled sizes its pool by CPU (a fixed 10 would queue decisions)", integer(func(s *envoySettings) *int { return &s.redisPool })},
	{"REDIS_TIMEOUT", "10s", "time-out of one Redis call when set; unset, ruled's own (--redis-timeout), since past it a rule's on_error decides", duration(func(s *envoySettings) *time.Duration { return &s.redisTimeout })},
	{"REDIS_PIPELINE_WINDOW", "0", "accepted; ruled always coalesces concurrent calls into pipelines", accept},
	{"REDIS_PIPELINE_LIMIT", "0", "accepted; see REDIS_PIPELINE_WINDOW", accept},
	{"REDIS_PERSECOND", "false", "", nil},
	{"REDIS_TLS_CLIENT_CERT", "", "", nil},
	{"REDIS_TLS_CACERT", "", "", nil},
	{"REDIS_SENTINEL_AUTH", "", "", nil},
	{"EXPIRATION_JITTER_MAX_SECONDS", "300", "accepted; ruled's counters expire with their window", accept},
	{"CACHE_KEY_PREFIX", "", "", nil},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "false", "", nil},
	{"SHADOW_MODE", "false", "", nil},
	{"QUOTA_MODE", "false", "", nil},
	{"RESPONSE_DYNAMIC_METADATA", "false", "", nil},
	{"TRACING_ENABLED", "false", "trace with OpenTelemetry, exported with OTLP to OTEL_EXPORTER_OTLP_ENDPOINT (the OTEL_* variables turn it on too)", boolean(func(s *envoySettings) *bool { return &s.tracing })},
	{"TRACING_SERVICE_NAME", "RateLimit", "the traces' service.name", str(func(s *envoySettings) *string { return &s.tracingName })},
	{"TRACING_SERVICE_NAMESPACE", "", "their service.namespace", str(func(s *envoySettings) *string { return &s.tracingNamespace })},
	{"TRACING_SERVICE_INSTANCE_ID", "", "their service.instance.id", str(func(s *envoySettings) *string { return &s.tracingInstance })},
	{"TRACING_EXPORTER_PROTOCOL", "http", "OTLP over http or grpc", str(func(s *envoySettings) *string { return &s.tracingProtocol })},
	{"TRACING_SAMPLING_RATE", "1", "share of the traces started here that are sampled", float(func(s *envoySettings) *float64 { return &s.tracingRate })},
	{"MEMCACHE_HOST_PORT", "", "", nil},
}

// ruledVars are ruled's own variables that the envoy ratelimit mode reads
// beside envoy ratelimit's, for what envoy ratelimit does not have: they
// are serve's flags' variables (docs/operations.md). docs/envoy.md lists
// them too; TestEnvoyVarsDocumented keeps the two together.
var ruledVars = []envoyVar{
	{envName("rlqs-listen"), "", "gRPC listener for Envoy's rate limit quota service, RLQS (off when unset; docs/envoy.md, Rate limit quota)", str(func(s *envoySettings) *string { return &s.rlqsListen })},
	{envName("rlqs-lease-share"), strconv.FormatFloat(defaultRLQSLeaseShare, 'g', -1, 64), "the share of a rule's limit one RLQS client may hold at a time (the translated rules have no lease: N)", share(func(s *envoySettings) *float64 { return &s.rlqsShare })},
}

// readEnvoyEnv reads envoy ratelimit's settings, with its defaults, and
// ruledVars, with theirs, and names the variables set that ruled does not
// support. Other environment variables are left alone.
func readEnvoyEnv(lookup func(string) (string, bool)) (*envoySettings, []string, error) {
	s := &envoySettings{}
	var unsupported []string
	for _, v := range slices.Concat(envoyVars, ruledVars) {
		val, set := lookup(v.name)
		if v.set == nil {
			if set {
				unsupported = append(unsupported, v.name)
			}
			continue
		}
		if !set {
			val = v.def
		}
		if err := v.set(s, val); err != nil {
			return nil, nil, fmt.Errorf("%s=%q: %w", v.name, val, err)
		}
	}
	otel, err := tracing.FromEnv(lookup)
	if err != nil {
		return nil, nil, err
	}
	s.otel = otel
	return s, unsupported, nil
}

func str(field func(*envoySettings) *string) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error { *field(s) = v; return nil }
}

func integer(field func(*envoySettings) *int) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		if v == "" {
			*field(s) = 0
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("want a whole number of at least 0")
		}
		*field(s) = n
		return nil
	}
}

func boolean(field func(*envoySettings) *bool) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return errors.New("want true or false")
		}
		*field(s) = b
		return nil
	}
}

func duration(field func(*envoySettings) *time.Duration) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return errors.New("want a duration such as 500ms, 10s or 1h")
		}
		*field(s) = d
		return nil
	}
}

func float(field func(*envoySettings) *float64) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return errors.New("want a number of at least 0")
		}
		*field(s) = f
		return nil
	}
}

// share reads a share of a limit, a number from 0 to 1
// (host.CheckLimitShare).
func share(field func(*envoySettings) *float64) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return host.ErrLimitShare
		}
		*field(s) = f
		return host.CheckLimitShare(f)
	}
}

// headers reads key:value pairs separated by commas, as envoy ratelimit's
// map settings are written.
func headers(field func(*envoySettings) *map[string]string) func(*envoySettings, string) error {
	return func(s *envoySettings, v string) error {
		m, err := parsePairs(v, ":")
		*field(s) = m
		return err
	}
}

// accept takes a variable whose job ruled does another way.
func accept(*envoySettings, string) error { return nil }

func backend(_ *envoySettings, v string) error {
	if !strings.EqualFold(v, "redis") {
		return errors.New("ruled keeps its state in Redis only")
	}
	return nil
}

// serveConfig is what serve does for these settings: serve's defaults
// (its flags, RULED_* variables left alone), with envoy ratelimit's
// settings over them.
func (s *envoySettings) serveConfig() (serveConfig, error) {
	var c serveConfig
	if err := serveFlags(&c, io.Discard).Parse(nil); err != nil {
		return c, err
	}
	c.listen = net.JoinHostPort(s.host, strconv.Itoa(s.port))
	c.grpcListen = net.JoinHostPort(s.grpcHost, strconv.Itoa(s.grpcPort))
	c.debugListen = net.JoinHostPort(s.debugHost, strconv.Itoa(s.debugPort))
	c.logFormat, c.mergeDomains = s.logFormat, s.mergeDomains
	c.rlqsListen, c.rlqsShare = s.rlqsListen, s.rlqsShare
	if s.redisTimeout > 0 {
		c.redisTimeout = s.redisTimeout
	}
	c.envoy = &envoyServe{
		grpcMaxAge: s.grpcMaxAge, grpcMaxAgeGrace: s.grpcMaxAgeGrace, grpcOnlyTLS: true,
		healthNeedsConfig: s.healthyWithConf, noRLSHeaders: !s.responseHeaders, poolSize: s.redisPool,
	}
	switch lv := strings.ToLower(s.logLevel); lv {
	case "trace", "debug":
		c.logLevel = "debug"
	case "info", "warn", "error":
		c.logLevel = lv
	case "warning":
		c.logLevel = "warn"
	case "fatal", "panic":
		c.logLevel = "error"
	default:
		return c, fmt.Errorf("LOG_LEVEL=%q: want trace, debug, info, warn, error, fatal or panic", s.logLevel)
	}
	if s.grpcTLS {
		if s.grpcCert == "" || s.grpcKey == "" {
			return c, errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		c.tlsCert, c.tlsKey, c.tlsClientCA = s.grpcCert, s.grpcKey, s.grpcCA
	}
	switch strings.ToUpper(s.configType) {
	case "FILE":
		c.envoyConfigs = filepath.Join(s.runtimeRoot, s.runtimeSub, s.runtimeApp)
	case "GRPC_XDS_SOTW":
		c.xds = xdsConfig{server: s.xdsServer, nodeID: s.xdsNodeID, nodeMetadata: s.xdsNodeMetadata, headers: s.xdsHeaders,
			useTLS: s.xdsTLS, tlsCA: s.xdsCA, tlsCert: s.xdsCert, tlsKey: s.xdsKey, serverName: s.xdsSAN,
			maxMsg: s.xdsMaxMsg, backoff: s.xdsBackoff, backoffMax: s.xdsBackoffMax, jitter: s.xdsJitter,
			readyUnconfigured: s.forceStart && !s.healthyWithConf}
		if !s.xdsJitterOn {
			c.xds.jitter = 0
		}
		if c.xds.server == "" {
			return c, errors.New("CONFIG_TYPE=GRPC_XDS_SOTW needs CONFIG_GRPC_XDS_SERVER_URL")
		}
	default:
		return c, fmt.Errorf("CONFIG_TYPE=%q: want FILE or GRPC_XDS_SOTW", s.configType)
	}
	redisURL, err := s.redisStoreURL()
	if err != nil {
		return c, err
	}
	c.redis = redisURL
	if s.useStatsd && !s.disableStats {
		c.envoy.statsd = net.JoinHostPort(s.statsdHost, strconv.Itoa(s.statsdPort))
		c.envoy.statsFlush = s.statsFlush
		c.envoy.nearLimitRatio = s.nearLimitRatio
	}
	if s.usePrometheus {
		c.envoy.prometheusAddr, c.envoy.prometheusPath = s.prometheusAddr, s.prometheusAt
	}
	c.tracing = s.otel
	if s.tracing {
		c.tracing.Enabled = true
		switch strings.ToLower(s.tracingProtocol) {
		case "http":
			c.tracing.Protocol = "http/protobuf"
		case "grpc":
			c.tracing.Protocol = "grpc"
		default:
			return c, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: want http or grpc", s.tracingProtocol)
		}
		c.tracing.Resource = []attribute.KeyValue{attribute.String("service.name", s.tracingName)}
		if s.tracingNamespace != "" {
			c.tracing.Resource = append(c.tracing.Resource, attribute.String("service.namespace", s.tracingNamespace))
		}
		if s.tracingInstance != "" {
			c.tracing.Resource = append(c.tracing.Resource, attribute.String("service.instance.id", s.tracingInstance))
		}
		rate := min(s.tracingRate, 1)
		c.tracing.SampleRatio = &rate
	}
	return c, nil
}

// redisStoreURL is envoy ratelimit's Redis settings as a store URL.
func (s *envoySettings) redisStoreURL() (string, error) {
	scheme := "redis"
	if s.redisTLS {
		scheme = "rediss"
	}
	var user *url.Userinfo
	if s.redisAuth != "" {
		if u, p, ok := strings.Cut(s.redisAuth, ":"); ok {
			user = url.UserPassword(u, p)
		} else {
			user = url.UserPassword("", s.redisAuth)
		}
	}
	auth := ""
	if user != nil {
		auth = user.String() + "@"
	}
	socket := strings.ToLower(s.redisSocket)
	if socket != "tcp" && socket != "unix" {
		return "", fmt.Errorf("REDIS_SOCKET_TYPE=%q: want tcp or unix", s.redisSocket)
	}
	switch strings.ToUpper(s.redisType) {
	case "SINGLE":
		if socket == "unix" {
			if s.redisTLS {
				return "", errors.New("REDIS_TLS=true needs REDIS_SOCKET_TYPE=tcp")
			}
			u := url.URL{Scheme: "unix", Path: s.redisURL, User: user}
			return u.String(), nil
		}
		return scheme + "://" + auth + s.redisURL, nil
	case "SENTINEL":
		parts := strings.Split(s.redisURL, ",")
		if len(parts) < 2 || slices.Contains(parts, "") {
			return "", fmt.Errorf("REDIS_URL=%q: with REDIS_TYPE=SENTINEL, want the master's name, then the sentinels' host:port, separated by commas", s.redisURL)
		}
		return scheme + "+sentinel://" + auth + strings.Join(parts[1:], ",") + "/" + url.PathEscape(parts[0]), nil
	case "CLUSTER":
		return scheme + "+cluster://" + auth + s.redisURL, nil
	default:
		return "", fmt.Errorf("REDIS_TYPE=%q: want SINGLE, SENTINEL or CLUSTER", s.redisType)
	}
}

// isEnvoyName reports whether the binary runs under envoy ratelimit's
// name, as an image's /bin/ratelimit.
func isEnvoyName(argv0 string) bool { return filepath.Base(argv0) == "ratelimit" }
