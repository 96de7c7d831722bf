package main

// The fault matrix: the real ruled binary, in its default configuration
// (managed Redis or an external one, ACL isolation on, default rule
// settings), through Redis faults. For each fault it asserts that decisions
// follow on_error while the fault lasts, each within its time-out; that
// normal decisions come back by themselves within a stated bound; that the
// plugins' ACL users are in place on the node that serves; that nothing
// panics.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

var (
	ruledBinOnce sync.Once
	ruledBin     string
	ruledBinErr  error
)

// TestMain removes what buildRuled built once the tests ran; run with
// rlqsClientEnv set, the test binary is an RLQS client instead, and with
// inflightAppEnv set an app behind the Go middleware.
func TestMain(m *testing.M) {
	if addr := os.Getenv(rlqsClientEnv); addr != "" {
		os.Exit(rlqsClientProcess(addr))
	}
	if base := os.Getenv(inflightAppEnv); base != "" {
		os.Exit(inflightAppProcess(base))
	}
	code := m.Run()
	if ruledBin != "" {
		_ = os.RemoveAll(filepath.Dir(ruledBin))
	}
	os.Exit(code)
}

// buildRuled builds this package's binary once per test run, as users run it.
func buildRuled(t *testing.T) string {
	t.Helper()
	ruledBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ruled-bin-")
		if err != nil {
			ruledBinErr = err
			return
		}
		ruledBin = filepath.Join(dir, "ruled")
		out, err := exec.Command("go", "build", "-o", ruledBin, ".").CombinedOutput()
		if err != nil {
			ruledBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if ruledBinErr != nil {
		t.Fatal(ruledBinErr)
	}
	return ruledBin
}

// faultRules is the rule file of the matrix: a fixed window of 3 per
// minute on path /open (default on_error: allow) and on /closed
// (on_error: deny), each per client IP. Its windows are moved (offset) so
// that one begins at the call (redistest.WindowOffset): the checks of a
// test made in the minute after it (checkLimits' four, a used-up subject
// asked again), its daemon's start included, fall in one window.
func faultRules() string {
	offset := redistest.WindowOffset(time.Minute)
	return fmt.Sprintf(`rules:
  - name: open
    when: request.path == "/open"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1m, offset: %[1]s}
  - name: closed
    when: request.path == "/closed"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1m, offset: %[1]s}
    on_error: deny
`, offset)
}

// daemon is one ruled process under test.
type daemon struct {
	t       *testing.T
	base    string
	dataDir string
	log     *lockedBuffer
	cmd     *exec.Cmd
	exited  chan struct{}
}

// startDaemon starts the binary with `serve --rules <faultRules()>` on a free
// port plus args, and waits until /readyz answers 200.
func startDaemon(t *testing.T, args ...string) *daemon {
	t.Helper()
	d := spawnDaemon(t, faultRules(), args...)
	d.waitReady(15 * time.Second)
	return d
}

// spawnDaemon starts the binary with `serve --rules <rules>` on a free
// port plus args, and returns once /livez answers.
func spawnDaemon(t *testing.T, rulesText string, args ...string) *daemon {
	t.Helper()
	return spawnDaemonAt(t, writeFile(t, t.TempDir(), "rules.yaml", rulesText), args...)
}

// spawnDaemonAt is spawnDaemon serving the rule file or directory at rules.
func spawnDaemonAt(t *testing.T, rules string, args ...string) *daemon {
	t.Helper()
	return spawnServe(t, append([]string{"--rules", rules}, args...)...)
}

// spawnServe starts the binary with `serve` and args (which say where the
// rules come from) on a free port, and returns once /livez answers.
func spawnServe(t *testing.T, args ...string) *daemon {
	t.Helper()
	return spawnServeEnv(t, nil, args...)
}

// spawnServeEnv is spawnServe with env added to the environment.
func spawnServeEnv(t *testing.T, env []string, args ...string) *daemon {
	t.Helper()
	bin := buildRuled(t)
	// A short directory: the managed socket path must fit in sun_path.
	dataDir, err := os.MkdirTemp("", "rf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	// A free port can be taken by another process (an outgoing connection
	// of another test) before ruled binds it: then try another.
	for attempt := 1; ; attempt++ {
		addr := freePort(t)
		d := &daemon{t: t, base: "http://" + addr, dataDir: dataDir, log: &lockedBuffer{}, exited: make(chan struct{})}
		all := append([]string{"serve", "--listen", addr, "--data-dir", dataDir}, args...)
		d.cmd = exec.Command(bin, all...)
		d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
		d.cmd.Env = append(os.Environ(), env...)
		if err := d.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = d.cmd.Wait(); close(d.exited) }()
		if d.serving() {
			t.Cleanup(d.stop)
			return d
		}
		if logs := d.log.String(); attempt == 3 || !strings.Contains(logs, "address already in use") {
			t.Fatalf("ruled exited at start:\n%s", tail(logs, 30))
		}
	}
}

// serving waits until the daemon answers /livez (true) or exits (false).
func (d *daemon) serving() bool {
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case <-d.exited:
			return false
		default:
		}
		if resp, err := http.Get(d.base + "/livez"); err == nil {
			resp.Body.Close()
			return true
		}
		if time.Now().After(deadline) {
			d.stop()
			d.t.Fatalf("ruled does not serve HTTP within 15s:\n%s", tail(d.log.String(), 30))
		}
	}
}

// stop ends the daemon with SIGTERM and checks that it stopped cleanly and
// never panicked.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		d.t.Error("ruled did not stop within 15s of SIGINT")
	}
	if logs := d.log.String(); strings.Contains(logs, "panic") || strings.Contains(logs, "DATA RACE") {
		d.t.Errorf("ruled's log shows a panic or a race:\n%s", tail(logs, 40))
	}
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// waitReady waits until /readyz answers 200.
func (d *daemon) waitReady(within time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(within)
	for {
		resp, err := http.Get(d.base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("not ready within %v: %v\n%s", within, err, tail(d.log.String(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// verdict is one /v1/check answer.
type verdict struct {
	status   int
	took     time.Duration
	degraded string // the rule's "degraded" field: "", "allow", "deny", "local"
	errText  string
}

// check asks about one request on path from ip.
func (d *daemon) check(path, ip string) verdict {
	d.t.Helper()
	v, err := d.tryCheck(path, ip)
	if err != nil {
		d.t.Fatal(err)
	}
	return v
}

// tryCheck is check for any goroutine: it returns what went wrong.
func (d *daemon) tryCheck(path, ip string) (verdict, error) {
	body := fmt.Sprintf(`{"request": {"ip": %q, "path": %q}}`, ip, path)
	start := time.Now()
	resp, err := http.Post(d.base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		return verdict{}, fmt.Errorf("check: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	v := verdict{status: resp.StatusCode, took: time.Since(start)}
	var r checkResult
	if err := json.Unmarshal(b, &r); err != nil || len(r.Results) != 1 {
		return verdict{}, fmt.Errorf("check %s: %d %s", path, resp.StatusCode, b)
	}
	v.degraded, v.errText = r.Results[0].Degraded, r.Results[0].Error
	return v, nil
}

// managedClient returns an administrative client of the managed
// redis-server, through its socket.
func (d *daemon) managedClient() *redis.Client {
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(d.dataDir, "redis.sock"), MaxRetries: -1})
	d.t.Cleanup(func() { _ = c.Close() })
	return c
}

// checkLimits asserts normal decisions on a fresh subject: on both paths,
// three requests admitted and the fourth denied by Redis, none degraded.
func (d *daemon) checkLimits(ip string) {
	d.t.Helper()
	for _, path := range []string{"/open", "/closed"} {
		var got []string
		for range 4 {
			v := d.check(path, ip)
			got = append(got, fmt.Sprintf("%d%s", v.status, v.degraded))
		}
		if strings.Join(got, " ") != "200 200 200 429" {
			d.t.Fatalf("%s from %s: %v, want normal decisions 200 200 200 429", path, ip, got)
		}
	}
}

// recoverAfter sends requests from fresh subjects until decisions are
// normal again and returns how long that took from since. While the fault
// lasts, every answer must follow on_error (degraded allow on /open,
// degraded deny with 503 on /closed) within its time-out, or be normal.
func (d *daemon) recoverAfter(since time.Time, bound time.Duration) time.Duration {
	d.t.Helper()
	return d.recoverAfterOn(since, bound, func(i int) string { return fmt.Sprintf("198.51.100.%d", i%250) }, nil)
}

// recoverAfterOn is recoverAfter with the subjects ip(0), ip(1), ...; a
// decision counts as normal only when served(ip) also holds (nil: always).
func (d *daemon) recoverAfterOn(since time.Time, bound time.Duration, ip func(i int) string, served func(ip string) bool) time.Duration {
	d.t.Helper()
	const perCall = time.Second // the 250 ms Redis time-out, with room for a loaded machine
	for i := 0; ; i++ {
		ip := ip(i)
		open, closed := d.check("/open", ip), d.check("/closed", ip)
		for _, v := range []verdict{open, closed} {
			if v.took > perCall {
				d.t.Errorf("a decision took %v during the fault, over %v", v.took, perCall)
			}
		}
		switch {
		case open.status == 200 && open.degraded == "" && closed.status == 200 && closed.degraded == "" &&
			(served == nil || served(ip)):
			return time.Since(since)
		case open.status != 200 || (open.degraded != "" && open.degraded != "allow"):
			d.t.Fatalf("/open during the fault: %d degraded=%q, want 200 degraded allow", open.status, open.degraded)
		case closed.degraded != "" && (closed.status != 503 || closed.degraded != "deny"):
			d.t.Fatalf("/closed during the fault: %d degraded=%q (%s), want 503 degraded deny", closed.status, closed.degraded, closed.errText)
		}
		if time.Since(since) > bound {
			d.t.Fatalf("decisions still degraded %v after the fault began (/open %q: %s; /closed %q: %s)\n%s",
				bound, open.degraded, open.errText, closed.degraded, closed.errText, tail(d.log.String(), 30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// assertUsers asserts that the node c talks to has the built-in plugins'
// ACL users, and that ruled's decisions on it run as them.
func assertUsers(t *testing.T, c *redis.Client) {
	t.Helper()
	users, err := c.Do(context.Background(), "ACL", "USERS").StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(users, " "), "ruled-plugin-fixedwindow") {
		t.Fatalf("ACL users on the serving node: %v, want ruled-plugin-fixedwindow", users)
	}
	// ruled's decisions run on connections authenticated as the plugin's
	// user (the ACL log records failures only, so ask CLIENT LIST).
	list, err := c.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(list, "user=ruled-plugin-fixedwindow") {
		t.Fatalf("no connection of ruled-plugin-fixedwindow on the serving node:\n%s", list)
	}
}

// TestFaultManagedRedisKilled is the newcomer's case: `ruled serve` with
// no --redis, the managed redis-server killed with SIGKILL. ruled restarts
// it (empty, without the plugin users); decisions follow on_error while it
// is down and are normal again, isolated, within 3 s, with nobody acting.
func TestFaultManagedRedisKilled(t *testing.T) {
	d := startDaemon(t)
	d.checkLimits("203.0.113.1")
	admin := d.managedClient()
	assertUsers(t, admin)
	info := admin.InfoMap(context.Background(), "server")
	if err := info.Err(); err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(info.Item("Server", "process_id"))
	p, err := os.FindProcess(pid)
	if pid == 0 || err != nil {
		t.Fatalf("managed redis-server pid %d: %v", pid, err)
	}
	killed := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	took := d.recoverAfter(killed, 3*time.Second)
	t.Logf("normal decisions %v after the managed redis-server was killed", took.Round(time.Millisecond))
	d.checkLimits("203.0.113.2")
	assertUsers(t, admin)
	if !bytes.Contains([]byte(d.log.String()), []byte("managed redis-server restarted")) {
		t.Fatalf("no restart in the log:\n%s", tail(d.log.String(), 30))
	}
	d.waitReady(2 * time.Second)
}

// metric returns the value of an unlabelled metric from /metrics.
func (d *daemon) metric(name string) string {
	d.t.Helper()
	_, body := httpGet(d.t, d.base+"/metrics")
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			return v
		}
	}
	d.t.Fatalf("no %s in /metrics", name)
	return ""
}

// readyIs waits until /readyz answers want (200 or 503) and ruled_redis_up
// says the same, and returns how long that took.
func (d *daemon) readyIs(want int, within time.Duration) time.Duration {
	d.t.Helper()
	start := time.Now()
	up := map[int]string{200: "1", 503: "0"}[want]
	for {
		code, body := httpGet(d.t, d.base+"/readyz")
		if code == want && d.metric("ruled_redis_up") == up {
			return time.Since(start)
		}
		if time.Since(start) > within {
			d.t.Fatalf("/readyz %d (%s), ruled_redis_up %s %v after the fault changed; want %d and %s",
				code, body, d.metric("ruled_redis_up"), within, want, up)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFaultExternalRedisRestartedEmpty: an external Redis restarts with
// nothing (no persistence): its plugin users are gone.
func TestFaultExternalRedisRestartedEmpty(t *testing.T) {
	srv := redistest.Start(t)
	d := startDaemon(t, "--redis", srv.URL())
	d.checkLimits("203.0.113.1")
	assertUsers(t, srv.Client())
	restarted := time.Now()
	srv.Restart()
	took := d.recoverAfter(restarted, 3*time.Second)
	t.Logf("normal decisions %v after the restart", took.Round(time.Millisecond))
	d.checkLimits("203.0.113.2")
	assertUsers(t, srv.Client())
	d.readyIs(200, 3*time.Second)
}

// TestFaultExternalRedisRestartedWithAOF: the data comes back from the
// append-only file, the ACL users do not; the counters carry on.
func TestFaultExternalRedisRestartedWithAOF(t *testing.T) {
	srv := redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always")
	d := startDaemon(t, "--redis", srv.URL())
	d.checkLimits("203.0.113.1")
	restarted := time.Now()
	srv.Restart()
	took := d.recoverAfter(restarted, 3*time.Second)
	t.Logf("normal decisions %v after the restart", took.Round(time.Millisecond))
	// The subject used up before the restart is still used up: the data
	// survived, and Redis (not on_error) says so.
	for _, path := range []string{"/open", "/closed"} {
		if v := d.check(path, "203.0.113.1"); v.status != 429 || v.degraded != "" {
			t.Fatalf("%s after an AOF restart: %d degraded=%q, want a normal 429", path, v.status, v.degraded)
		}
	}
	assertUsers(t, srv.Client())
}

// TestFaultExternalRedisPaused: a Redis that stops answering (SIGSTOP)
// turns /readyz to 503 and ruled_redis_up to 0 within 2 s, though no call
// is made; decisions follow on_error within their time-out; once it answers
// again, both turn back by themselves.
func TestFaultExternalRedisPaused(t *testing.T) {
	srv := redistest.Start(t)
	d := startDaemon(t, "--redis", srv.URL())
	d.readyIs(200, 2*time.Second)
	srv.Pause()
	t.Cleanup(srv.Resume)
	took := d.readyIs(503, 2*time.Second)
	t.Logf("not ready %v after Redis stopped answering", took.Round(time.Millisecond))
	for _, path := range []string{"/open", "/closed"} {
		v := d.check(path, "203.0.113.9")
		want := map[string]string{"/open": "200allow", "/closed": "503deny"}[path]
		if got := fmt.Sprintf("%d%s", v.status, v.degraded); got != want || v.took > time.Second {
			t.Fatalf("%s while Redis is paused: %s after %v, want %s within 1s", path, got, v.took, want)
		}
	}
	resumed := time.Now()
	srv.Resume()
	took = d.readyIs(200, 2*time.Second)
	t.Logf("ready %v after Redis answered again", took.Round(time.Millisecond))
	d.recoverAfter(resumed, 3*time.Second)
	d.checkLimits("203.0.113.3")
}
