package store

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// logSink collects log output for assertions and echoes it to t.Log.
type logSink struct {
	t  testing.TB
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	s.mu.Unlock()
	s.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t testing.TB) (*slog.Logger, *logSink) {
	sink := &logSink{t: t}
	return slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})), sink
}

func openManagedT(t *testing.T, o Options) (*Store, *logSink) {
	t.Helper()
	log, sink := testLogger(t)
	o.Logger = log
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, sink
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return !errors.Is(err, syscall.ESRCH)
	}
	if runtime.GOOS == "linux" {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// "pid (comm) state ...": the state follows the last ')'.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return true
}

func waitGone(t *testing.T, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive after %v", pid, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// storeGoroutines returns the stacks of goroutines running this package's
// code, other than tests.
func storeGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "host/store.(*") {
			out = append(out, g)
		}
	}
	return out
}

func assertNoStoreGoroutines(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		gs := storeGoroutines()
		if len(gs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d store goroutines left after Close:\n%s", len(gs), strings.Join(gs, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func setGet(ctx context.Context, c redis.UniversalClient, key, val string) error {
	if err := c.Set(ctx, key, val, 0).Err(); err != nil {
		return err
	}
	got, err := c.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	if got != val {
		return fmt.Errorf("GET %s = %q, want %q", key, got, val)
	}
	return nil
}

func TestManagedStart(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	s, sink := openManagedT(t, Options{DataDir: dataDir})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	if !s.Managed() || s.Kind() != KindManaged {
		t.Errorf("Managed() = %v, Kind() = %s; want true, managed", s.Managed(), s.Kind())
	}
	sock := filepath.Join(dataDir, "redis.sock")
	if s.SocketPath() != sock {
		t.Errorf("SocketPath() = %q, want %q", s.SocketPath(), sock)
	}
	want := regexp.MustCompile(`^managed redis-server \d+\.\d+\.\d+ at unix://` + regexp.QuoteMeta(sock) + `$`)
	if !want.MatchString(s.Describe()) {
		t.Errorf("Describe() = %q, want it to match %s", s.Describe(), want)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := setGet(ctx, s.Client(), "k", "v"); err != nil {
		t.Fatal(err)
	}

	// The server is the one we started, on the socket only, keeping nothing on disk.
	info, err := s.Client().Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "process_id:"+strconv.Itoa(s.PID())+"\r\n") {
		t.Errorf("INFO server does not show process_id %d", s.PID())
	}
	for param, want := range map[string]string{"port": "0", "save": "", "appendonly": "no", "unixsocketperm": "700", "daemonize": "no", "always-show-logo": "no"} {
		got, err := s.Client().ConfigGet(ctx, param).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[param] != want {
			t.Errorf("CONFIG GET %s = %q, want %q", param, got[param], want)
		}
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o700 {
		t.Errorf("socket mode = %v, want a socket with 0700", fi.Mode())
	}
	o := s.Client().(*redis.Client).Options()
	if o.Network != "unix" || !o.ContextTimeoutEnabled || o.ReadTimeout != DefaultTimeout || o.DialTimeout != DefaultDialTimeout {
		t.Errorf("client options: network %s, ctx time-outs %v, read %v, dial %v", o.Network, o.ContextTimeoutEnabled, o.ReadTimeout, o.DialTimeout)
	}
	// A per-call deadline bounds a blocking call (ContextTimeoutEnabled).
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	start := time.Now()
	err = s.Client().BLPop(short, 5*time.Second, "nothing").Err()
	cancelShort()
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("BLPOP with a 100ms deadline: err %v after %v; want an error well before 2s", err, time.Since(start))
	}
	// The server's output reached the logger, tagged with its pid; the
	// component is the store, the relayed program the line's source.
	if !strings.Contains(sink.String(), "component=store source=redis-server") || !strings.Contains(sink.String(), "pid="+strconv.Itoa(s.PID())) ||
		strings.Contains(sink.String(), "component=redis-server") {
		t.Errorf("redis-server output not logged as component=store source=redis-server:\n%s", sink.String())
	}
}

func TestManagedRestartAfterKill(t *testing.T) {
	s, sink := openManagedT(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := setGet(ctx, s.Client(), "before", "1"); err != nil {
		t.Fatal(err)
	}
	pid1 := s.PID()
	if pid1 <= 0 {
		t.Fatalf("PID() = %d", pid1)
	}
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(10 * time.Second)
	var err error
	for {
		callCtx, callCancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err = setGet(callCtx, s.Client(), "after", "2")
		callCancel()
		if err == nil && s.Restarts() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client did not work again within 10s of the kill: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	pid2 := s.PID()
	if pid2 == pid1 || pid2 <= 0 {
		t.Errorf("PID() after restart = %d, before = %d", pid2, pid1)
	}
	if n := s.Restarts(); n != 1 {
		t.Errorf("Restarts() = %d, want 1", n)
	}
	if alive(pid1) {
		t.Errorf("killed process %d is still alive", pid1)
	}
	// A fresh server: nothing survived on disk.
	if err := s.Client().Get(ctx, "before").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET before after the restart: %v, want redis.Nil", err)
	}
	logs := sink.String()
	for _, want := range []string{"exited unexpectedly", "signal: killed", "managed redis-server restarted", "pid=" + strconv.Itoa(pid2)} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
}

func TestManagedClose(t *testing.T) {
	log, _ := testLogger(t)
	s, err := Open(context.Background(), Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := s.PID(), filepath.Dir(s.SocketPath())
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if alive(pid) {
		t.Errorf("redis-server %d still running after Close", pid)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still there after Close (stat: %v)", dir, err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if s.PID() != 0 {
		t.Errorf("PID() after Close = %d, want 0", s.PID())
	}
	if err := s.Ping(context.Background()); err == nil {
		t.Error("Ping after Close succeeded")
	}
	assertNoStoreGoroutines(t)
}

func TestManagedCloseKeepsDataDir(t *testing.T) {
	dataDir := t.TempDir()
	log, _ := testLogger(t)
	s, err := Open(context.Background(), Options{Logger: log, DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Errorf("redis-server %d still running after Close", pid)
	}
	if _, err := os.Stat(dataDir); err != nil {
		t.Errorf("data dir removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dataDir, "redis.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind (stat: %v)", err)
	}
	// The data dir can be used again.
	s2, _ := openManagedT(t, Options{DataDir: dataDir})
	if err := s2.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestManagedCloseDuringRestart closes the Store while the supervisor waits
// to restart a killed server.
func TestManagedCloseDuringRestart(t *testing.T) {
	log, sink := testLogger(t)
	s, err := Open(context.Background(), Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	pid := s.PID()
	dir := filepath.Dir(s.SocketPath())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(sink.String(), "exited unexpectedly") {
		time.Sleep(5 * time.Millisecond)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := s.Restarts(); n != 0 {
		t.Errorf("Restarts() = %d after closing within the backoff, want 0", n)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still there after Close (stat: %v)", dir, err)
	}
	assertNoStoreGoroutines(t)
}

func TestManagedDataDirInUse(t *testing.T) {
	dataDir := t.TempDir()
	s, _ := openManagedT(t, Options{DataDir: dataDir})
	log, _ := testLogger(t)
	_, err := Open(context.Background(), Options{Logger: log, DataDir: dataDir})
	if err == nil || !strings.Contains(err.Error(), "another ruled") {
		t.Fatalf("second Open on the same data dir: %v; want an 'another ruled' error", err)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("first store broken by the second Open: %v", err)
	}
}

func TestManagedOpenCancelled(t *testing.T) {
	dataDir := t.TempDir()
	log, _ := testLogger(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Open(ctx, Options{Logger: log, DataDir: dataDir}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with a cancelled context: %v, want context.Canceled", err)
	}

	// Cancel once redis-server has written its first line: the start is
	// under way and must be abandoned, the process killed.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	sink := &logSink{t: t}
	h := slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelDebug})
	s, err := Open(ctx, Options{DataDir: dataDir, Logger: slog.New(cancelHandler{h, cancel})})
	if err == nil {
		s.Close()
		t.Skip("redis-server was ready before the cancellation arrived")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open cancelled during start-up: %v, want context.Canceled", err)
	}
	m := regexp.MustCompile(`pid=(\d+)`).FindStringSubmatch(sink.String())
	if m == nil {
		t.Fatalf("no redis-server output logged:\n%s", sink.String())
	}
	pid, _ := strconv.Atoi(m[1])
	if alive(pid) {
		t.Errorf("redis-server %d still running after a cancelled Open", pid)
	}
	assertNoStoreGoroutines(t)
}

// cancelHandler calls cancel on the first record from redis-server.
type cancelHandler struct {
	slog.Handler
	cancel context.CancelFunc
}

func (h cancelHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "pid" {
			h.cancel()
		}
		return true
	})
	return h.Handler.Handle(ctx, r)
}

func (h cancelHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return cancelHandler{h.Handler.WithAttrs(as), h.cancel}
}

func (h cancelHandler) WithGroup(name string) slog.Handler {
	return cancelHandler{h.Handler.WithGroup(name), h.cancel}
}

func TestManagedStartFailure(t *testing.T) {
	// A data dir whose socket path is too long is refused before starting.
	long := filepath.Join(t.TempDir(), strings.Repeat("d", 120))
	if _, err := Open(context.Background(), Options{DataDir: long}); err == nil || !strings.Contains(err.Error(), "shorter --data-dir") {
		t.Errorf("Open with a long data dir: %v; want a 'shorter --data-dir' error", err)
	}
	// A redis-server that exits at once: its output is in the error.
	log, _ := testLogger(t)
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "redis-server")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec "+bin+" \"$@\" --no-such-directive 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = Open(context.Background(), Options{Logger: log, RedisServer: script})
	if err == nil || !strings.Contains(err.Error(), "exited during start-up") || !strings.Contains(err.Error(), "no-such-directive") {
		t.Errorf("Open with a failing redis-server: %v; want its exit and output", err)
	}
}

const wantNotFound = "store: redis-server not found on PATH: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or pass --redis redis://host:port"

func TestRedisServerMissing(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	missing := filepath.Join(t.TempDir(), "nope", "redis-server")
	_, err := Open(context.Background(), Options{RedisServer: missing, DataDir: dataDir})
	if !errors.Is(err, ErrRedisServerNotFound) {
		t.Fatalf("Open with RedisServer %s: %v, want ErrRedisServerNotFound", missing, err)
	}
	for _, want := range []string{missing, "apt-get install redis-server", "brew install redis", "--redis redis://host:port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir created although redis-server is missing (stat: %v)", err)
	}

	t.Setenv("PATH", t.TempDir())
	_, err = Open(context.Background(), Options{})
	if err == nil || err.Error() != wantNotFound {
		t.Errorf("Open without redis-server on PATH:\n got %v\nwant %s", err, wantNotFound)
	}
	if !errors.Is(err, ErrRedisServerNotFound) {
		t.Errorf("error %v does not wrap ErrRedisServerNotFound", err)
	}
}

// TestManagedDiesWithRuled kills a process that holds a managed Store with
// SIGKILL: the kernel must take its redis-server down too (Pdeathsig).
func TestManagedDiesWithRuled(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Pdeathsig is Linux only")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperHoldStore$")
	cmd.Env = append(os.Environ(), "RULED_STORE_HELPER_DIR="+t.TempDir())
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	pidc := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "REDIS_PID="); ok {
				n, _ := strconv.Atoi(v)
				pidc <- n
			}
		}
		close(pidc)
	}()
	var pid int
	select {
	case pid = <-pidc:
	case <-time.After(20 * time.Second):
		t.Fatal("helper did not report its redis-server pid")
	}
	if pid <= 0 || !alive(pid) {
		t.Fatalf("helper's redis-server pid %d is not running", pid)
	}
	t.Cleanup(func() {
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	waitGone(t, pid, 5*time.Second)
}

// TestHelperHoldStore is run by TestManagedDiesWithRuled in a child process.
func TestHelperHoldStore(t *testing.T) {
	dir := os.Getenv("RULED_STORE_HELPER_DIR")
	if dir == "" {
		t.Skip("helper for TestManagedDiesWithRuled")
	}
	s, err := Open(context.Background(), Options{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("REDIS_PID=%d\n", s.PID())
	time.Sleep(time.Minute) // killed by the parent
	t.Fatal("helper was not killed")
}

func TestNextBackoff(t *testing.T) {
	d := minRestartBackoff
	var got []time.Duration
	for range 8 {
		got = append(got, d)
		d = nextBackoff(d)
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backoff sequence %v, want %v", got, want)
	}
}

func TestLineLogger(t *testing.T) {
	log, sink := testLogger(t)
	w := newLineLogger(log)
	long := strings.Repeat("x", 3*maxLogLine)
	_, _ = w.Write([]byte("123:M 22 Nov 2026 02:26:12.345 # Warning: something\r\n123:M 22 Nov 2026 02:26:12.345 # Configuration loaded\n123:M 22 Nov 2026 02:26:12.345 * Ready"))
	_, _ = w.Write([]byte(" to accept\nplain start-up error\n" + long[:maxLogLine] + long[maxLogLine:] + "\ntail"))
	w.flush()
	logs := sink.String()
	for _, want := range []string{
		`level=WARN msg="Warning: something" pid=123`,
		`level=DEBUG msg="Ready to accept" pid=123`,
		`level=DEBUG msg="Configuration loaded" pid=123`,
		`level=WARN msg="plain start-up error"`,
		`truncated=true`,
		`msg=tail`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	for _, l := range strings.Split(logs, "\n") {
		if len(l) > maxLogLine+200 {
			t.Errorf("a logged line is %d bytes long", len(l))
		}
	}
	if tail := w.tail(); !strings.HasPrefix(tail, "Warning: something | Configuration loaded | Ready to accept | plain start-up error | xxx") || !strings.HasSuffix(tail, " | tail") {
		t.Errorf("tail() = %.120q…", tail)
	}
}

// TestLineLoggerLevels relays redis-server 7's start and stop lines: its
// banner, notices and lifecycle lines are debug, its warnings warnings.
func TestLineLoggerLevels(t *testing.T) {
	for _, c := range []struct{ line, want string }{
		{"9:C 24 Nov 2026 23:38:53.628 # oO0OoO0OoO0Oo Redis is starting oO0OoO0OoO0Oo", "DEBUG"},
		{"9:C 24 Nov 2026 23:38:53.628 # Redis version=7.0.15, bits=64, commit=00000000, modified=0, pid=9, just started", "DEBUG"},
		{"9:C 24 Nov 2026 23:38:53.628 # Configuration loaded", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:53.629 * monotonic clock: POSIX clock_gettime", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:53.629 * Running mode=standalone, port=0.", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:53.629 # Server initialized", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:53.629 # WARNING Memory overcommit must be enabled! Without it, ...", "WARN"},
		{"9:M 24 Nov 2026 23:38:53.629 . verbose detail", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:53.629 - client closed", "DEBUG"},
		{"9:signal-handler (1795563534) Received SIGTERM scheduling shutdown...", "DEBUG"},
		{"9:signal-handler (1795563534) Received SIGSEGV, crashing", "WARN"},
		{"9:M 24 Nov 2026 23:38:54.640 # User requested shutdown...", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:54.640 # Redis is now ready to exit, bye bye...", "DEBUG"},
		{"9:M 24 Nov 2026 23:38:54.640 # Error trying to save the DB", "WARN"},
		{"*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***", "WARN"},
	} {
		log, sink := testLogger(t)
		w := newLineLogger(log)
		_, _ = w.Write([]byte(c.line + "\n"))
		if got := sink.String(); !strings.Contains(got, "level="+c.want+" ") {
			t.Errorf("%q logged as %q, want level %s", c.line, got, c.want)
		}
	}
}

// TestManagedLogIsQuiet starts and stops a real redis-server: of what it
// prints, nothing reaches the log above debug level but real warnings.
func TestManagedLogIsQuiet(t *testing.T) {
	s, sink := openManagedT(t, Options{DataDir: filepath.Join(t.TempDir(), "data")})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var relayed int
	for _, l := range strings.Split(sink.String(), "\n") {
		if !strings.Contains(l, "source=redis-server") {
			continue
		}
		relayed++
		switch {
		case strings.Contains(l, "level=DEBUG "):
		case strings.Contains(l, "level=WARN ") && strings.Contains(l, `msg="WARNING`): // a real warning, such as the memory overcommit advice
		default:
			t.Errorf("redis-server line relayed above debug: %s", l)
		}
	}
	for _, want := range []string{`level=DEBUG msg="Redis version=`, `level=DEBUG msg="Ready to accept connections`} {
		if !strings.Contains(sink.String(), want) && !strings.Contains(sink.String(), strings.Replace(want, "Ready", "The server is now ready", 1)) {
			t.Errorf("log lacks %s:\n%s", want, sink.String())
		}
	}
	if relayed < 3 {
		t.Errorf("%d redis-server lines relayed:\n%s", relayed, sink.String())
	}
}

func TestExternalStandalone(t *testing.T) {
	srv := redistest.Start(t)
	log, _ := testLogger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Open(ctx, Options{URL: srv.URL(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if s.Managed() || s.Kind() != KindStandalone || s.PID() != 0 {
		t.Errorf("Managed %v, Kind %s, PID %d; want false, standalone, 0", s.Managed(), s.Kind(), s.PID())
	}
	if want := "redis://" + srv.Addr() + " (standalone)"; s.Describe() != want {
		t.Errorf("Describe() = %q, want %q", s.Describe(), want)
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := setGet(ctx, s.Client(), "ext", "ok"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Close leaves an external server alone.
	if got, err := srv.Client().Get(ctx, "ext").Result(); err != nil || got != "ok" {
		t.Errorf("external server after Close: GET = %q, %v", got, err)
	}

	// The plain host:port form reaches the same server.
	s2, err := Open(ctx, Options{URL: srv.Addr(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.Client().Get(ctx, "ext").Result(); err != nil || got != "ok" {
		t.Errorf("via %s: GET = %q, %v", srv.Addr(), got, err)
	}
}

func TestExternalPassword(t *testing.T) {
	const pw = "Xyzzy-s3cret"
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// redistest cannot start a server that requires a password (its
	// readiness PING has none), so set it afterwards.
	if err := srv.Client().ConfigSet(ctx, "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	log, sink := testLogger(t)

	s, err := Open(ctx, Options{URL: "redis://:" + pw + "@" + srv.Addr() + "/1", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := setGet(ctx, s.Client(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Client().Do(ctx, "CLIENT", "INFO").Text(); err != nil || !strings.Contains(n, " db=1 ") {
		t.Errorf("CLIENT INFO = %q, %v; want db=1", n, err)
	}

	bad, err := Open(ctx, Options{URL: "redis://:wrong-" + pw + "@" + srv.Addr(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	err = bad.Ping(ctx)
	if err == nil {
		t.Fatal("Ping with a wrong password succeeded")
	}
	for _, text := range []string{s.Describe(), bad.Describe(), err.Error(), sink.String()} {
		if strings.Contains(text, "Xyzzy") {
			t.Errorf("password shown in %q", text)
		}
	}
}

// TestExternalDown: Open succeeds while Redis is down, Ping fails quickly,
// and the Store works once Redis is up.
func TestExternalDown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	log, _ := testLogger(t)
	s, err := Open(context.Background(), Options{URL: "redis://" + addr, Logger: log})
	if err != nil {
		t.Fatalf("Open with Redis down: %v", err)
	}
	defer s.Close()
	start := time.Now()
	err = s.Ping(context.Background())
	if err == nil {
		t.Fatal("Ping with Redis down succeeded")
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Ping with Redis down took %v", el)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("Ping error %q does not name %s", err, addr)
	}
}

func TestExternalRedisRestart(t *testing.T) {
	srv := redistest.Start(t)
	log, _ := testLogger(t)
	s, err := Open(context.Background(), Options{URL: srv.URL(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := s.Ping(context.Background()); err == nil {
		t.Fatal("Ping succeeded with the server killed")
	}
	srv.Restart()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("Ping did not recover within 10s of the restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestExternalCluster(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	busPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	srv := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(busPort),
		"--cluster-announce-ip", "127.0.0.1", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	admin := srv.Client()
	if err := admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := admin.ClusterInfo(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := testLogger(t)
	s, err := Open(ctx, Options{URL: "redis+cluster://" + srv.Addr(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.Client().(*redis.ClusterClient); !ok || s.Kind() != KindCluster {
		t.Fatalf("client %T, kind %s; want a cluster client", s.Client(), s.Kind())
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // keys in many slots
		if err := setGet(ctx, s.Client(), "k"+strconv.Itoa(i), "v"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestExternalSentinel runs a real Sentinel (redistest has no helper for
// one) in front of a password-protected master from redistest.
func TestExternalSentinel(t *testing.T) {
	const pw = "Xyzzy-master"
	master := redistest.Start(t)
	if err := master.Client().ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sentPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(
		"port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel auth-pass mymaster %s\n",
		sentPort, dir, master.Port, pw)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sentAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sentPort))
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentAddr, MaxRetries: -1})
	defer sc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		if _, err := sc.GetMasterAddrByName(ctx, "mymaster").Result(); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("sentinel did not come up: %s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	log, sink := testLogger(t)
	s, err := Open(ctx, Options{URL: "redis+sentinel://:" + pw + "@" + sentAddr + "/mymaster", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if want := "redis+sentinel://" + sentAddr + "/mymaster (sentinel)"; s.Describe() != want || s.Kind() != KindSentinel {
		t.Errorf("Describe() = %q, Kind() = %s; want %q, sentinel", s.Describe(), s.Kind(), want)
	}
	if err := setGet(ctx, s.Client(), "via-sentinel", "yes"); err != nil {
		t.Fatal(err)
	}
	// The write reached the master.
	mc := redis.NewClient(&redis.Options{Addr: master.Addr(), Password: pw})
	defer mc.Close()
	if got, err := mc.Get(ctx, "via-sentinel").Result(); err != nil || got != "yes" {
		t.Errorf("master GET = %q, %v", got, err)
	}
	if strings.Contains(sink.String(), "Xyzzy") {
		t.Error("password logged")
	}
}
