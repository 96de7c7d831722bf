package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestParseURL(t *testing.T) {
	type want struct {
		kind     Kind
		desc     string
		addrs    []string // Addr, cluster Addrs or SentinelAddrs
		network  string   // standalone only
		user     string
		pass     string
		db       int
		tls      bool
		master   string
		sentPass string
	}
	tests := []struct {
		url  string
		want want
	}{
		{"redis://127.0.0.1:6379", want{kind: KindStandalone, desc: "redis://127.0.0.1:6379 (standalone)", addrs: []string{"127.0.0.1:6379"}, network: "tcp"}},
		{"redis://localhost", want{kind: KindStandalone, desc: "redis://localhost:6379 (standalone)", addrs: []string{"localhost:6379"}, network: "tcp"}},
		{"redis://alice:s3cret@127.0.0.1:6380/2", want{kind: KindStandalone, desc: "redis://alice@127.0.0.1:6380/2 (standalone)", addrs: []string{"127.0.0.1:6380"}, network: "tcp", user: "alice", pass: "s3cret", db: 2}},
		{"redis://:s3cret@127.0.0.1:6380?db=3&pool_size=7", want{kind: KindStandalone, desc: "redis://127.0.0.1:6380/3 (standalone)", addrs: []string{"127.0.0.1:6380"}, network: "tcp", pass: "s3cret", db: 3}},
		{"redis://:p%40ss%2Fw0rd@127.0.0.1:6379", want{kind: KindStandalone, desc: "redis://127.0.0.1:6379 (standalone)", addrs: []string{"127.0.0.1:6379"}, network: "tcp", pass: "p@ss/w0rd"}},
		{"redis://[::1]:6379", want{kind: KindStandalone, desc: "redis://[::1]:6379 (standalone)", addrs: []string{"[::1]:6379"}, network: "tcp"}},
		{"rediss://bob:s3cret@localhost:6380", want{kind: KindStandalone, desc: "rediss://bob@localhost:6380 (standalone)", addrs: []string{"localhost:6380"}, network: "tcp", user: "bob", pass: "s3cret", tls: true}},
		{"REDIS://127.0.0.1", want{kind: KindStandalone, desc: "redis://127.0.0.1:6379 (standalone)", addrs: []string{"127.0.0.1:6379"}, network: "tcp"}},
		{"unix:///run/redis/redis.sock", want{kind: KindStandalone, desc: "unix:///run/redis/redis.sock (standalone)", addrs: []string{"/run/redis/redis.sock"}, network: "unix"}},
		{"unix://:s3cret@/run/redis.sock?db=4", want{kind: KindStandalone, desc: "unix:///run/redis.sock?db=4 (standalone)", addrs: []string{"/run/redis.sock"}, network: "unix", pass: "s3cret", db: 4}},
		{"127.0.0.1:6390", want{kind: KindStandalone, desc: "redis://127.0.0.1:6390 (standalone)", addrs: []string{"127.0.0.1:6390"}, network: "tcp"}},
		{"redis-host", want{kind: KindStandalone, desc: "redis://redis-host:6379 (standalone)", addrs: []string{"redis-host:6379"}, network: "tcp"}},
		{"127.0.0.1:7000,127.0.0.1:7001, 127.0.0.1:7002", want{kind: KindCluster, desc: "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 (cluster)", addrs: []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}}},
		{"node-a,node-b", want{kind: KindCluster, desc: "redis+cluster://node-a:6379,node-b:6379 (cluster)", addrs: []string{"node-a:6379", "node-b:6379"}}},
		{"redis+cluster://127.0.0.1:7000", want{kind: KindCluster, desc: "redis+cluster://127.0.0.1:7000 (cluster)", addrs: []string{"127.0.0.1:7000"}}},
		{"redis+cluster://carol:s3cret@127.0.0.1:7000,[::1]:7001/?max_redirects=5", want{kind: KindCluster, desc: "redis+cluster://carol@127.0.0.1:7000,[::1]:7001 (cluster)", addrs: []string{"127.0.0.1:7000", "[::1]:7001"}, user: "carol", pass: "s3cret"}},
		{"rediss+cluster://:s3cret@localhost:7000,localhost:7001", want{kind: KindCluster, desc: "rediss+cluster://localhost:7000,localhost:7001 (cluster)", addrs: []string{"localhost:7000", "localhost:7001"}, pass: "s3cret", tls: true}},
		{"redis+sentinel://:s3cret@127.0.0.1:26379,127.0.0.1:26380/mymaster", want{kind: KindSentinel, desc: "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster (sentinel)", addrs: []string{"127.0.0.1:26379", "127.0.0.1:26380"}, pass: "s3cret", master: "mymaster"}},
		{"redis+sentinel://dave:s3cret@sent-a,sent-b:5000/main/3?sentinel_password=t0p", want{kind: KindSentinel, desc: "redis+sentinel://dave@sent-a:26379,sent-b:5000/main/3 (sentinel)", addrs: []string{"sent-a:26379", "sent-b:5000"}, user: "dave", pass: "s3cret", db: 3, master: "main", sentPass: "t0p"}},
		{"rediss+sentinel://127.0.0.1:26379/mymaster", want{kind: KindSentinel, desc: "rediss+sentinel://127.0.0.1:26379/mymaster (sentinel)", addrs: []string{"127.0.0.1:26379"}, tls: true, master: "mymaster"}},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ep, err := parseURL(tt.url)
			if err != nil {
				t.Fatalf("parseURL: %v", err)
			}
			w := tt.want
			if ep.kind != w.kind || ep.desc != w.desc {
				t.Errorf("kind, desc = %s, %q; want %s, %q", ep.kind, ep.desc, w.kind, w.desc)
			}
			if strings.Contains(ep.desc, "s3cret") || strings.Contains(ep.desc, "t0p") {
				t.Errorf("description %q shows a password", ep.desc)
			}
			var addrs []string
			var user, pass string
			var db int
			var tls bool
			switch ep.kind {
			case KindStandalone:
				o := ep.simple
				addrs, user, pass, db, tls = []string{o.Addr}, o.Username, o.Password, o.DB, o.TLSConfig != nil
				if o.Network != w.network {
					t.Errorf("network = %q, want %q", o.Network, w.network)
				}
			case KindCluster:
				o := ep.cluster
				addrs, user, pass, tls = o.Addrs, o.Username, o.Password, o.TLSConfig != nil
			case KindSentinel:
				o := ep.failover
				addrs, user, pass, db, tls = o.SentinelAddrs, o.Username, o.Password, o.DB, o.TLSConfig != nil
				if o.MasterName != w.master || o.SentinelPassword != w.sentPass || o.SentinelUsername != "" {
					t.Errorf("master, sentinel user, sentinel password = %q, %q, %q; want %q, \"\", %q",
						o.MasterName, o.SentinelUsername, o.SentinelPassword, w.master, w.sentPass)
				}
			}
			if !slices.Equal(addrs, w.addrs) {
				t.Errorf("addresses = %q, want %q", addrs, w.addrs)
			}
			if user != w.user || pass != w.pass || db != w.db || tls != w.tls {
				t.Errorf("user, password, db, tls = %q, %q, %d, %v; want %q, %q, %d, %v", user, pass, db, tls, w.user, w.pass, w.db, w.tls)
			}
		})
	}
}

func TestParseURLErrors(t *testing.T) {
	// Every password here is "Xyzzy…"; no error may show any of it.
	tests := []struct {
		url  string
		want string // a fragment of the error
	}{
		{"http://127.0.0.1:6379", `unknown scheme "http"`},
		{"redis://:Xyzzy42@127.0.0.1:notaport", "invalid port"},
		{"redis://u:Xyzzy42@127.0.0.1:6379/abc", "invalid database number"},
		{"redis://u:Xyzzy42@127.0.0.1:6379/1/2", "invalid URL path"},
		{"redis://u:Xyzzy42@127.0.0.1:6379?bogus=1", "unexpected option: bogus"},
		{"redis://u:Xyzzy42@127.0.0.1:6379?dial_timeout=soon", "dial_timeout"},
		{"redis://:Xyzzy/42@127.0.0.1:6379", "percent-encode"},
		{"redis://:Xyzzy?42@127.0.0.1:6379", "percent-encode"},
		{"redis://:Xyzzy%zz@127.0.0.1:6379", "invalid URL escape"},
		{"redis://:Xyzzy42@127.0.0.1:6379,127.0.0.1:6380", "use redis+cluster://"},
		{"unix://:Xyzzy42@", "empty unix socket path"},
		{"redis+sentinel://:Xyzzy42@127.0.0.1:26379", "<master name>"},
		{"redis+sentinel://:Xyzzy42@/mymaster", "no host addresses"},
		{"redis+sentinel://:Xyzzy42@127.0.0.1:26379/m/x", `bad database number "x"`},
		{"redis+sentinel://:Xyzzy42@127.0.0.1:26379/m?route_randomly=true", "route_randomly is not supported"},
		{"redis+sentinel://127.0.0.1:26379/m?password=Xyzzy42", "password is not supported"},
		{"redis+sentinel://127.0.0.1:26379/m?sentinel_password=Xyzzy42&db=x", "invalid database number"},
		{"redis://127.0.0.1:6379?password=Xyzzy42", "unexpected option: password"},
		{"redis+sentinel://:Xyzzy42@127.0.0.1:99999/m", "bad port"},
		{"redis+cluster://", "no host addresses"},
		{"redis+cluster://:Xyzzy42@127.0.0.1:7000/2", "no database number"},
		{"redis+cluster://:Xyzzy42@127.0.0.1:7000,,127.0.0.1:7001", "empty address"},
		{"redis+cluster://:Xyzzy42@127.0.0.1:7000?addr=127.0.0.1:7001", "not in addr="},
		{"redis+cluster://:Xyzzy42@127.0.0.1:7000?max_redirects=many", "max_redirects"},
		{"redis+cluster://:Xyzzy%zz@127.0.0.1:7000", "bad user information"},
		{"127.0.0.1:7000,,127.0.0.1:7001", "empty address"},
		{"127.0.0.1:7000,::1", "bad address"},
		{"u:Xyzzy42@127.0.0.1:7000,127.0.0.1:7001", "credentials need a URL"},
		{"/var/run/redis.sock", "unix:///path"},
		{"127.0.0.1:0", "bad port"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ep, err := parseURL(tt.url)
			if err == nil {
				t.Fatalf("parseURL succeeded (%s); want an error", ep.desc)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q does not say %q", msg, tt.want)
			}
			if strings.Contains(msg, "Xyzzy") {
				t.Errorf("error %q shows (part of) the password", msg)
			}
			if !strings.HasPrefix(msg, "store: ") {
				t.Errorf("error %q lacks the package prefix", msg)
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0":      "redis://***@h:1/0",
		"redis://:pa/ss@h":        "redis://***@h",
		"redis://h:1":             "redis://h:1",
		"u:pw@h:1,h:2":            "***@h:1,h:2",
		"unix://:pw@/run/r.sock":  "unix://***@/run/r.sock",
		"redis://h:1?name=a@b.cd": "redis://***@b.cd",
		"redis+sentinel://h/m?sentinel_password=pw&db=1&Pass%77ord=x&pool_size=2": "redis+sentinel://h/m?sentinel_password=***&db=1&Pass%77ord=***&pool_size=2",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOpenExternalOptions checks what Open makes of the time-out and pool
// options, without contacting any server.
func TestOpenExternalOptions(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, Options{URL: "redis://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := s.Client().(*redis.Client).Options()
	if !o.ContextTimeoutEnabled || o.ReadTimeout != DefaultTimeout || o.WriteTimeout != DefaultTimeout ||
		o.DialTimeout != DefaultDialTimeout || o.PoolSize != DefaultPoolSize() {
		t.Errorf("defaults: ctx time-outs %v, read %v, write %v, dial %v, pool %d; want true, %v, %v, %v, %d",
			o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolSize,
			DefaultTimeout, DefaultTimeout, DefaultDialTimeout, DefaultPoolSize())
	}

	s2, err := Open(ctx, Options{URL: "redis://127.0.0.1:1?read_timeout=40ms&pool_size=3", Timeout: 2 * time.Second, PoolSize: 9})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	o = s2.Client().(*redis.Client).Options()
	if o.ReadTimeout != 40*time.Millisecond || o.WriteTimeout != 2*time.Second || o.DialTimeout != 2*time.Second || o.PoolSize != 3 {
		t.Errorf("URL over Options: read %v, write %v, dial %v, pool %d; want 40ms, 2s, 2s, 3", o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolSize)
	}

	s3, err := Open(ctx, Options{URL: "redis+cluster://127.0.0.1:1,127.0.0.1:2", Timeout: 100 * time.Millisecond, PoolSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s3.Close()
	co := s3.Client().(*redis.ClusterClient).Options()
	if !co.ContextTimeoutEnabled || co.ReadTimeout != 100*time.Millisecond || co.DialTimeout != DefaultDialTimeout || co.PoolSize != 5 {
		t.Errorf("cluster: ctx time-outs %v, read %v, dial %v, pool %d; want true, 100ms, 1s, 5", co.ContextTimeoutEnabled, co.ReadTimeout, co.DialTimeout, co.PoolSize)
	}
	if s3.Kind() != KindCluster || s3.Managed() || s3.PID() != 0 || s3.SocketPath() != "" {
		t.Errorf("cluster store: kind %s, managed %v, pid %d, socket %q", s3.Kind(), s3.Managed(), s3.PID(), s3.SocketPath())
	}

	// go-redis panics on a pool size that does not fit an int32; Open must not.
	if s4, err := Open(ctx, Options{URL: "redis://127.0.0.1:1?pool_size=99999999999"}); err == nil {
		s4.Close()
		t.Error("Open with pool_size=99999999999 succeeded; want an error")
	}
	// go-redis panics on route_randomly for a failover client; it is refused.
	if _, err := Open(ctx, Options{URL: "redis+sentinel://127.0.0.1:1/m?route_randomly=1"}); err == nil {
		t.Error("Open with route_randomly succeeded; want an error")
	}
	var ue *urlError
	if _, err := Open(ctx, Options{URL: "ftp://x"}); !errors.As(err, &ue) {
		t.Errorf("Open(ftp://x) error %v is not a *urlError", err)
	}
}
