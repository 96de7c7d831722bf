package store

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind says what kind of Redis deployment a Store talks to.
type Kind string

// The deployments a Store can talk to.
const (
	// KindManaged is a redis-server started and supervised by the Store.
	KindManaged Kind = "managed"
	// KindStandalone is one external server (redis://, rediss://, unix://).
	KindStandalone Kind = "standalone"
	// KindSentinel is a master found through Redis Sentinel.
	KindSentinel Kind = "sentinel"
	// KindCluster is a Redis Cluster.
	KindCluster Kind = "cluster"
)

// endpoint is a parsed Options.URL: the options of exactly one of the three
// go-redis client kinds, and a description that never holds a password.
type endpoint struct {
	kind     Kind
	desc     string
	simple   *redis.Options         // KindStandalone
	failover *redis.FailoverOptions // KindSentinel
	cluster  *redis.ClusterOptions  // KindCluster
}

const (
	defaultRedisPort    = "6379"
	defaultSentinelPort = "26379"
)

// urlError is a bad Options.URL. Its message shows the URL with the user
// information replaced by "***" and never quotes any part of the credentials.
type urlError struct {
	redacted string
	reason   string
}

func (e *urlError) Error() string {
	return fmt.Sprintf("store: bad Redis URL %q: %s", e.redacted, e.reason)
}

func badURL(raw, format string, args ...any) error {
	return &urlError{redacted: redactURL(raw), reason: fmt.Sprintf(format, args...)}
}

// redactURL replaces everything between "://" and the last '@' with "***",
// and the value of every query parameter whose name contains "pass". It errs
// on the side of hiding too much: an '@' in a query hides the host too.
func redactURL(raw string) string {
	if at := strings.LastIndexByte(raw, '@'); at >= 0 {
		start := 0
		if i := strings.Index(raw, "://"); i >= 0 && i < at {
			start = i + 3
		}
		raw = raw[:start] + "***" + raw[at:]
	}
	q := strings.IndexByte(raw, '?')
	if q < 0 {
		return raw
	}
	params := strings.Split(raw[q+1:], "&")
	for i, p := range params {
		k, _, hasValue := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err != nil || strings.Contains(strings.ToLower(dk), "pass") {
			if hasValue || err != nil {
				params[i] = k + "=***"
			}
		}
	}
	return raw[:q+1] + strings.Join(params, "&")
}

var quotedRE = regexp.MustCompile(`\s*"[^"]*"`)

// safeReason turns an error from net/url or go-redis's URL parsers into a
// reason that can be shown: the *url.Error wrapper (which repeats the whole
// URL, password included) is dropped and so is any quoted fragment of the
// input that net/url cites, since it may come from the user information.
func safeReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return quotedRE.ReplaceAllString(ue.Err.Error(), "")
	}
	return strings.TrimPrefix(err.Error(), "redis: ")
}

// parseURL parses every URL form that Options.URL accepts:
//
//	redis://[user:pass@]host[:port][/db][?opts]       standalone
//	rediss://…                                        standalone over TLS
//	unix://[user:pass@]/path/to/redis.sock[?db=N]     standalone over a unix socket
//	redis+sentinel://[user:pass@]h1:p1,h2:p2/master[/db][?opts]   (rediss+sentinel for TLS)
//	redis+cluster://[user:pass@]h1:p1,h2:p2[?opts]                (rediss+cluster for TLS)
//	h1:p1,h2:p2                                        cluster (two or more addresses)
//	host[:port]                                        standalone (a single address)
//
// opts are go-redis's URL options (dial_timeout, pool_size, ...).
func parseURL(raw string) (*endpoint, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return nil, errors.New("store: empty Redis URL")
	}
	i := strings.Index(raw, "://")
	if i < 0 {
		return parsePlain(raw)
	}
	scheme := strings.ToLower(raw[:i])
	rest := raw[i+3:]
	// The authority ends at the first '/', '?' or '#'. An '@' after that
	// means credentials with an unescaped '/', '?' or '#': everything the
	// parsers would say about the "host" would quote part of the password.
	authEnd := strings.IndexAny(rest, "/?#")
	if authEnd >= 0 && strings.Contains(rest[authEnd:], "@") {
		return nil, badURL(raw, "'@' after the host part: percent-encode '/', '?', '#' and '@' in the user name and password")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		return parseSimple(raw, scheme)
	case "redis+sentinel", "rediss+sentinel":
		return parseSentinel(raw, strings.TrimSuffix(scheme, "+sentinel"), rest)
	case "redis+cluster", "rediss+cluster":
		return parseCluster(raw, strings.TrimSuffix(scheme, "+cluster"), rest)
	default:
		return nil, badURL(raw, "unknown scheme %q: want redis://, rediss://, unix://, redis+sentinel://, redis+cluster:// or a host:port list", scheme)
	}
}

// parsePlain handles a scheme-less "host[:port]" (standalone) or
// "h1:p1,h2:p2,…" (cluster).
func parsePlain(raw string) (*endpoint, error) {
	if strings.Contains(raw, "@") {
		return nil, badURL(raw, "credentials need a URL: redis://user:pass@host:port or redis+cluster://user:pass@h1:p1,h2:p2")
	}
	if strings.ContainsAny(raw, "/?#") {
		return nil, badURL(raw, "not a host:port list; for a unix socket use unix:///path/to/redis.sock")
	}
	addrs, err := splitAddrs(raw, strings.Split(raw, ","), defaultRedisPort)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 1 {
		return parseSimple("redis://"+addrs[0], "redis")
	}
	return parseCluster(raw, "redis", raw)
}

// splitAddrs validates a list of host[:port] and adds the default port.
func splitAddrs(raw string, list []string, defPort string) ([]string, error) {
	out := make([]string, 0, len(list))
	for _, a := range list {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, badURL(raw, "empty address in the host list")
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			// No port (or an unbracketed IPv6 literal, which we refuse).
			if strings.Count(a, ":") > 0 && !strings.HasPrefix(a, "[") {
				return nil, badURL(raw, "bad address %q: want host:port ([::1]:port for IPv6)", a)
			}
			host, port = strings.Trim(a, "[]"), defPort
		}
		if host == "" || strings.ContainsAny(host, " \t%[]") {
			return nil, badURL(raw, "bad host in address %q", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, badURL(raw, "bad port in address %q: want 1-65535", a)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// parseSimple uses go-redis's ParseURL for the single-server forms.
func parseSimple(raw, scheme string) (*endpoint, error) {
	if scheme != "unix" {
		if u, err := url.Parse(raw); err == nil && strings.Contains(u.Host, ",") {
			return nil, badURL(raw, "a %s:// URL names one server; use redis+cluster:// or redis+sentinel:// for a list", scheme)
		}
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, badURL(raw, "%s", safeReason(err))
	}
	e := &endpoint{kind: KindStandalone, simple: o}
	var b strings.Builder
	if o.Network == "unix" {
		b.WriteString("unix://")
		writeUser(&b, o.Username, o.Password)
		b.WriteString(o.Addr)
		if o.DB != 0 {
			fmt.Fprintf(&b, "?db=%d", o.DB)
		}
	} else {
		b.WriteString(scheme + "://")
		writeUser(&b, o.Username, o.Password)
		b.WriteString(o.Addr)
		if o.DB != 0 {
			fmt.Fprintf(&b, "/%d", o.DB)
		}
	}
	b.WriteString(" (standalone)")
	e.desc = b.String()
	return e, nil
}

// writeUser writes "user@" when the URL carries a user name and a password.
// A user name without a password is left out: it is often a password typed
// without the leading ':'.
func writeUser(b *strings.Builder, user, password string) {
	if user != "" && password != "" {
		b.WriteString(url.User(user).String() + "@")
	}
}

// authority splits "userinfo@h1:p1,h2:p2/path?query" into its parts. The
// userinfo is parsed by net/url so percent-escapes work as in any URL.
func authority(raw, rest string) (user *url.Userinfo, hosts, path string, query url.Values, err error) {
	if i := strings.IndexByte(rest, '#'); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query, err = url.ParseQuery(rest[i+1:])
		if err != nil {
			return nil, "", "", nil, badURL(raw, "bad query: %s", quotedRE.ReplaceAllString(err.Error(), ""))
		}
		rest = rest[:i]
	} else {
		query = url.Values{}
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		path = rest[i:]
		rest = rest[:i]
	}
	hosts = rest
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		u, perr := url.Parse("redis://" + rest[:at] + "@localhost")
		if perr != nil || u.User == nil {
			return nil, "", "", nil, badURL(raw, "bad user information (percent-encode special characters in the user name and password)")
		}
		user, hosts = u.User, rest[at+1:]
	}
	if hosts == "" {
		return nil, "", "", nil, badURL(raw, "no host addresses")
	}
	return user, hosts, path, query, nil
}

// goRedisURL rebuilds a URL in the single-host-plus-addr-parameters form that
// go-redis's ParseClusterURL and ParseFailoverURL read.
func goRedisURL(scheme string, user *url.Userinfo, addrs []string, path string, q url.Values) string {
	q.Del("addr")
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	u := &url.URL{Scheme: scheme, User: user, Host: addrs[0], Path: path, RawQuery: q.Encode()}
	return u.String()
}

// parseCluster handles redis+cluster://, rediss+cluster:// and plain lists.
func parseCluster(raw, scheme, rest string) (*endpoint, error) {
	user, hosts, path, q, err := authority(raw, rest)
	if err != nil {
		return nil, err
	}
	if strings.Trim(path, "/") != "" {
		return nil, badURL(raw, "a Cluster has no database number or path")
	}
	if q.Has("addr") {
		return nil, badURL(raw, "list the Cluster nodes in the host part, not in addr=")
	}
	addrs, err := splitAddrs(raw, strings.Split(hosts, ","), defaultRedisPort)
	if err != nil {
		return nil, err
	}
	o, err := redis.ParseClusterURL(goRedisURL(scheme, user, addrs, "", q))
	if err != nil {
		return nil, badURL(raw, "%s", safeReason(err))
	}
	var b strings.Builder
	b.WriteString(scheme + "+cluster://")
	writeUser(&b, o.Username, o.Password)
	b.WriteString(strings.Join(addrs, ","))
	b.WriteString(" (cluster)")
	return &endpoint{kind: KindCluster, cluster: o, desc: b.String()}, nil
}

// parseSentinel handles redis+sentinel:// and rediss+sentinel://. The user
// information authenticates to the master (and replicas); Sentinels that
// require a password get it from sentinel_username / sentinel_password.
func parseSentinel(raw, scheme, rest string) (*endpoint, error) {
	user, hosts, path, q, err := authority(raw, rest)
	if err != nil {
		return nil, err
	}
	if q.Has("addr") {
		return nil, badURL(raw, "list the Sentinels in the host part, not in addr=")
	}
	for _, p := range []string{"route_by_latency", "route_randomly", "replica_only", "use_disconnected_replicas", "username", "password", "master_name"} {
		if q.Has(p) {
			return nil, badURL(raw, "option %s is not supported here", p)
		}
	}
	sentUser, sentPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")

	segs := strings.FieldsFunc(path, func(r rune) bool { return r == '/' })
	if len(segs) == 0 || len(segs) > 2 {
		return nil, badURL(raw, "want redis+sentinel://host:port[,host:port…]/<master name>[/<db>]")
	}
	master, err := url.PathUnescape(segs[0])
	if err != nil || master == "" {
		return nil, badURL(raw, "bad master name")
	}
	dbPath := ""
	if len(segs) == 2 {
		if n, err := strconv.Atoi(segs[1]); err != nil || n < 0 {
			return nil, badURL(raw, "bad database number %q", segs[1])
		}
		dbPath = "/" + segs[1]
	}
	addrs, err := splitAddrs(raw, strings.Split(hosts, ","), defaultSentinelPort)
	if err != nil {
		return nil, err
	}
	q.Set("master_name", master)
	o, err := redis.ParseFailoverURL(goRedisURL(scheme, nil, addrs, dbPath, q))
	if err != nil {
		return nil, badURL(raw, "%s", safeReason(err))
	}
	if user != nil {
		o.Username = user.Username()
		o.Password, _ = user.Password()
	}
	o.SentinelUsername, o.SentinelPassword = sentUser, sentPass

	var b strings.Builder
	b.WriteString(scheme + "+sentinel://")
	writeUser(&b, o.Username, o.Password)
	b.WriteString(strings.Join(addrs, ","))
	b.WriteString("/" + url.PathEscape(master))
	if o.DB != 0 {
		fmt.Fprintf(&b, "/%d", o.DB)
	}
	b.WriteString(" (sentinel)")
	return &endpoint{kind: KindSentinel, failover: o, desc: b.String()}, nil
}
