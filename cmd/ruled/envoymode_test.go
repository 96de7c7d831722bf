package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envFrom is a lookup of the environment kv (KEY=VALUE each).
func envFrom(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestEnvoyDefaults: with no variable set, the settings are envoy
// ratelimit's defaults, not ruled's.
func TestEnvoyDefaults(t *testing.T) {
	s, unsupported, err := readEnvoyEnv(envFrom())
	if err != nil || len(unsupported) > 0 {
		t.Fatalf("%v %v", unsupported, err)
	}
	c, err := s.serveConfig()
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][2]string{
		"listen":      {c.listen, "0.0.0.0:8080"},
		"grpc":        {c.grpcListen, "0.0.0.0:8081"},
		"debug":       {c.debugListen, "0.0.0.0:6070"},
		"log level":   {c.logLevel, "warn"},
		"configs":     {c.envoyConfigs, "/srv/runtime_data/current/config"},
		"redis":       {c.redis, "unix:///var/run/nutcracker/ratelimit.sock"},
		"statsd":      {c.envoy.statsd, "localhost:8125"},
		"xds server":  {c.xds.server, ""},
		"prometheus":  {c.envoy.prometheusAddr, ""},
		"log format":  {c.logFormat, "text"},
		"tls cert":    {c.tlsCert, ""},
		"client refs": {c.refundsFlag, "allow"},
		"rlqs":        {c.rlqsListen, ""},
		"rlqs share":  {fmt.Sprint(c.rlqsShare), "0.1"},
	} {
		if got[0] != got[1] {
			t.Errorf("%s: %q, want %q", what, got[0], got[1])
		}
	}
	if !c.envoy.noRLSHeaders || c.envoy.healthNeedsConfig || c.mergeDomains {
		t.Errorf("headers off %v, health needs config %v, merge %v: want true, false, false", c.envoy.noRLSHeaders, c.envoy.healthNeedsConfig, c.mergeDomains)
	}
}

// TestEnvoyRedisSettings: REDIS_* as envoy ratelimit reads them, as store
// URLs.
func TestEnvoyRedisSettings(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis.svc:6379"}, "redis://redis.redis.svc:6379"},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=r:6379", "REDIS_AUTH=s3cr:t", "REDIS_TLS=true"}, "rediss://s3cr:t@r:6379"},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=r:6379", "REDIS_AUTH=p@ss"}, "redis://:p%40ss@r:6379"},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=sentinel", "REDIS_URL=mymaster,s1:26379,s2:26379"}, "redis+sentinel://s1:26379,s2:26379/mymaster"},
		{[]string{"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=CLUSTER", "REDIS_URL=n1:7000,n2:7001"}, "redis+cluster://n1:7000,n2:7001"},
		{[]string{"REDIS_URL=/run/redis.sock"}, "unix:///run/redis.sock"},
	} {
		s, _, err := readEnvoyEnv(envFrom(tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.serveConfig()
		if err != nil {
			t.Fatalf("%v: %v", tc.env, err)
		}
		if c.redis != tc.want {
			t.Errorf("%v: %q, want %q", tc.env, c.redis, tc.want)
		}
	}
}

// TestEnvoyBadSettings: a value envoy ratelimit would not take is an error
// that names the variable.
func TestEnvoyBadSettings(t *testing.T) {
	for env, want := range map[string]string{
		"PORT=http":                `PORT="http": want a whole number`,
		"USE_STATSD=yes please":    `USE_STATSD="yes please": want true or false`,
		"STATS_FLUSH_INTERVAL=5":   `STATS_FLUSH_INTERVAL="5": want a duration`,
		"CONFIG_TYPE=CONSUL":       `CONFIG_TYPE="CONSUL": want FILE or GRPC_XDS_SOTW`,
		"LOG_LEVEL=loud":           `LOG_LEVEL="loud"`,
		"REDIS_TYPE=ring":          `REDIS_TYPE="ring"`,
		"BACKEND_TYPE=memcache":    `BACKEND_TYPE="memcache": ruled keeps its state in Redis only`,
		"GRPC_SERVER_USE_TLS=true": "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY",
		"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS=novalue": "want key:value pairs",
		"RULED_RLQS_LEASE_SHARE=1.5":                        `RULED_RLQS_LEASE_SHARE="1.5": want a share from 0 to 1`,
		"RULED_RLQS_LEASE_SHARE=a tenth":                    `RULED_RLQS_LEASE_SHARE="a tenth": want a share from 0 to 1`,
	} {
		s, _, err := readEnvoyEnv(envFrom(env))
		if err == nil {
			_, err = s.serveConfig()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", env, err, want)
		}
	}
}

// TestEnvoyUnsupportedNamed: the variables set that ruled does not
// support are named, in the table's order; those it does not know are not
// envoy ratelimit's and left alone.
func TestEnvoyUnsupportedNamed(t *testing.T) {
	_, unsupported, err := readEnvoyEnv(envFrom("CACHE_KEY_PREFIX=x", "EXTRA_TAGS=a:b", "PORT=9000", "MY_OWN=1"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(unsupported, ",") != "EXTRA_TAGS,CACHE_KEY_PREFIX" {
		t.Fatalf("unsupported %v, want EXTRA_TAGS,CACHE_KEY_PREFIX", unsupported)
	}
}

// varsTable is a table of docs/envoy.md made from vars, whose defaults
// the column head names.
func varsTable(vars []envoyVar, defaults string) string {
	var b strings.Builder
	b.WriteString("| variable | " + defaults + " | what ruled does |\n|---|---|---|\n")
	for _, v := range vars {
		def := "(none)"
		if v.def != "" {
			def = "`" + v.def + "`"
		}
		does := v.does
		if v.set == nil {
			does = "**not supported**: named in the WARN line at start when set"
		}
		b.WriteString("| `" + v.name + "` | " + def + " | " + does + " |\n")
	}
	return b.String()
}

// TestEnvoyVarsDocumented: docs/envoy.md's tables of variables, envoy
// ratelimit's and ruled's own, are the ones the code reads (go test -run
// TestEnvoyVarsDocumented -update rewrites them).
func TestEnvoyVarsDocumented(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "envoy.md")
	for _, table := range []struct{ mark, want string }{
		{"envoy-vars", varsTable(envoyVars, "envoy ratelimit's default")},
		{"ruled-vars", varsTable(ruledVars, "default")},
	} {
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		begin, end := "<!-- "+table.mark+" -->\n", "<!-- /"+table.mark+" -->"
		i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
		if i < 0 || j < i {
			t.Fatalf("%s has no %q ... %q block", path, begin, end)
		}
		if got := string(doc[i+len(begin) : j]); got != table.want {
			if *update {
				out := string(doc[:i+len(begin)]) + table.want + string(doc[j:])
				if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("docs/envoy.md's %s table differs from the code (go test -run TestEnvoyVarsDocumented -update):\n%s", table.mark, table.want)
		}
	}
}

// TestContainerfileRunsAsRatelimit: the image that
// examples/deploy/Containerfile builds has the binary at /bin/ratelimit,
// and the binary run under that path is envoy ratelimit (no image is built
// here: the same layout is made from this package's binary).
func TestContainerfileRunsAsRatelimit(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "deploy", "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	cf := string(b)
	for _, line := range []string{"-o /out/ruled ./cmd/ruled", "COPY --from=build /out/ruled /usr/local/bin/ruled", "RUN ln -s /usr/local/bin/ruled /bin/ratelimit"} {
		if !strings.Contains(cf, line) {
			t.Fatalf("the Containerfile has no %q", line)
		}
	}
	root := t.TempDir()
	for _, d := range []string{"usr/local/bin", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(buildRuled(t), filepath.Join(root, "usr/local/bin/ruled")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "usr/local/bin/ruled"), filepath.Join(root, "bin/ratelimit")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "bin/ratelimit"))
	cmd.Env = []string{"PORT=http"} // a value only envoy ratelimit's mode reads, and refuses
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), `ratelimit: PORT="http": want a whole number`) {
		t.Fatalf("/bin/ratelimit did not run as envoy ratelimit: %v\n%s", err, out)
	}
}

// TestServeFlagsDocumented: every flag of ruled serve is in
// docs/operations.md's table, with its variable.
func TestServeFlagsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	var c serveConfig
	serveFlags(&c, io.Discard).VisitAll(func(f *flag.Flag) {
		for _, want := range []string{"`--" + f.Name, "`" + envName(f.Name) + "`"} {
			if !strings.Contains(string(doc), want) {
				t.Errorf("docs/operations.md does not name %s", want)
			}
		}
	})
}
