package process_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

// faulty loads the test plugin that misbehaves on request, with its log
// captured, and returns it with a Host for rule "r" and subject "s".
func faulty(t *testing.T, opts process.Options) (*process.Plugin, sdk.Host, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	opts.Logger = logs.logger()
	p := load(t, binary(t, faultyPkg), opts)
	env := plugintest.NewEnv(t)
	client := redis.NewClient(&redis.Options{Addr: env.Redis.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	c := capability.New(client, capability.Options{Timeout: 250 * time.Millisecond, Logger: opts.Logger})
	return p, plugintest.Register(t, c, p).Host("r", "s"), logs
}

func decide(p *process.Plugin, h sdk.Host, cfg sdk.Config, fault string) (sdk.Decision, error) {
	return p.Decide(context.Background(), h, cfg, sdk.Request{Subject: "s", Hits: 1, Attrs: map[string]string{"fault": fault}})
}

func TestDecideThroughTheHostCapability(t *testing.T) {
	p, h, logs := faulty(t, process.Options{})
	if info := p.Info(); info.Name != "faulty" || len(info.Scripts) != 1 || info.Scripts[0].Commands[0] != "INCRBY" {
		t.Fatalf("Info %+v", info)
	}
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 2})
	for i, want := range []bool{true, true, false} {
		d, err := decide(p, h, cfg, "")
		if err != nil || d.Allowed != want || d.Limit != 2 || d.Window != time.Minute || d.Reset != 1500*time.Microsecond {
			t.Fatalf("decision %d: %+v %v", i, d, err)
		}
	}
	// Arguments and replies keep their bytes and types across both hops.
	if _, err := decide(p, h, cfg, "args"); err != nil {
		t.Fatal(err)
	}
	// Capability errors keep their class, as for a native plugin.
	if _, err := decide(p, h, cfg, "undeclared"); capability.ClassOf(err) != capability.ClassRefused || !strings.Contains(err.Error(), "not declared") {
		t.Fatalf("undeclared script: %v (class %q)", err, capability.ClassOf(err))
	}
	pid := p.PID()
	if _, err := decide(p, h, cfg, "error"); err == nil || !strings.Contains(err.Error(), "asked to fail") {
		t.Fatalf("plugin error: %v", err)
	}
	if _, err := decide(p, h, cfg, "panic"); err == nil || !strings.Contains(err.Error(), "decide asked to panic") {
		t.Fatalf("plugin panic: %v", err)
	}
	if p.PID() != pid || p.Status() != nil {
		t.Fatal("a recovered panic restarted the process")
	}
	// Log lines go through the decision's Host; stderr to the plugin's log.
	if _, err := decide(p, h, cfg, "log"); err != nil {
		t.Fatal(err)
	}
	// An Eval after Decide returned is refused.
	if _, err := decide(p, h, cfg, "late-eval"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("log:\n%s", logs)
		}
	}()
	waitFor(t, 3*time.Second, "log lines", func() bool {
		s := logs.String()
		return strings.Contains(s, "hello from the plugin") && strings.Contains(s, "stderr: a line on stderr") &&
			strings.Contains(s, "late eval: ") && strings.Contains(s, "no decision in progress")
	})
	if s := logs.String(); !strings.Contains(s, "Decide panicked") {
		t.Errorf("the panic was not logged:\n%s", s)
	}
}

func TestConfigure(t *testing.T) {
	p, _, _ := faulty(t, process.Options{})
	_, err := p.Configure(map[string]any{"limit": 0, "typo": true})
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) || len(list.Unwrap()) != 2 || !strings.Contains(err.Error(), "limit: must be at least 1") ||
		!strings.Contains(err.Error(), "typo: unknown field") {
		t.Fatalf("config errors: %v", err)
	}
	if _, err := p.Configure(map[string]any{"limit": 1, "panic": true}); err == nil || !strings.Contains(err.Error(), "panicked in Configure") {
		t.Fatalf("Configure panic: %v", err)
	}
	if _, err := p.Decide(context.Background(), nil, 42, sdk.Request{}); err == nil {
		t.Fatal("a foreign config was accepted")
	}
}

// faultModes are the ways the faulty plugin decides: through Decide, and
// in steps over the steps socket.
var faultModes = []struct {
	name string
	env  []string
}{{"decide", nil}, {"steps", []string{"RULED_TEST_STEPS=1"}}}

func TestCrashedPluginRestartsWithItsConfigs(t *testing.T) {
	for _, m := range faultModes {
		t.Run(m.name, func(t *testing.T) { testCrashedPluginRestarts(t, m.env) })
	}
}

func testCrashedPluginRestarts(t *testing.T, env []string) {
	p, h, logs := faulty(t, process.Options{RestartBackoff: 200 * time.Millisecond, Env: env})
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 100})
	pid := p.PID()
	if _, err := decide(p, h, cfg, "exit"); err == nil {
		t.Fatal("a crashing decision succeeded")
	}
	// While the process is down, decisions fail at once.
	waitFor(t, time.Second, "the plugin marked down", func() bool { return p.Status() != nil })
	start := time.Now()
	_, err := decide(p, h, cfg, "")
	if !errors.Is(err, process.ErrDown) || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("decision while down took %v: %v", time.Since(start), err)
	}
	if _, err := p.Configure(map[string]any{"limit": 1}); !errors.Is(err, process.ErrDown) {
		t.Fatalf("Configure while down: %v", err)
	}
	waitFor(t, 5*time.Second, "the restart", func() bool { return p.Status() == nil })
	if p.PID() == pid || p.PID() == 0 || p.Restarts() != 1 {
		t.Fatalf("pid %d -> %d, restarts %d", pid, p.PID(), p.Restarts())
	}
	// The config made before the crash was sent to the new process.
	if d, err := decide(p, h, cfg, ""); err != nil || !d.Allowed {
		t.Fatalf("after restart: %+v %v", d, err)
	}
	if s := logs.String(); !strings.Contains(s, "process plugin down; restarting it") || !strings.Contains(s, "exit status 3") ||
		!strings.Contains(s, "process plugin restarted") {
		t.Fatalf("log:\n%s", s)
	}
}

func TestHungPluginIsRestarted(t *testing.T) {
	for _, m := range faultModes {
		t.Run(m.name, func(t *testing.T) { testHungPluginIsRestarted(t, m.env) })
	}
}

func testHungPluginIsRestarted(t *testing.T, env []string) {
	p, h, _ := faulty(t, process.Options{CallTimeout: 300 * time.Millisecond, HungAfter: 2, RestartBackoff: 10 * time.Millisecond, Env: env})
	if got, want := p.Steps(), env != nil; got != want {
		t.Fatalf("steps %v, want %v", got, want)
	}
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 100})
	pid := p.PID()
	for i := range 2 {
		start := time.Now()
		_, err := decide(p, h, cfg, "hang")
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took < 250*time.Millisecond || took > 2*time.Second {
			t.Fatalf("hung call %d: %v after %v", i, err, took)
		}
	}
	waitFor(t, 5*time.Second, "a new process", func() bool { return p.Status() == nil && p.PID() != pid })
	if d, err := decide(p, h, cfg, ""); err != nil || !d.Allowed {
		t.Fatalf("after restart: %+v %v", d, err)
	}
}

func TestStoppedPluginFailsItsHealthCheck(t *testing.T) {
	// The call time-out leaves a loaded machine room to answer health
	// checks, so that only the stopped process is taken for dead.
	p, h, _ := faulty(t, process.Options{CallTimeout: time.Second, HealthInterval: 100 * time.Millisecond, RestartBackoff: 10 * time.Millisecond})
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 100})
	pid := p.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a new process", func() bool { return p.Status() == nil && p.PID() != pid })
	if d, err := decide(p, h, cfg, ""); err != nil || !d.Allowed {
		t.Fatalf("after restart: %+v %v", d, err)
	}
	waitFor(t, 5*time.Second, "the stopped process killed", func() bool { return len(childrenRunning(p.Path())) == 1 })
}

func TestSHA256Pin(t *testing.T) {
	src := binary(t, faultyPkg)
	path := filepath.Join(t.TempDir(), "faulty")
	copyFile(t, src, path)
	sum := digest(t, path)
	wrong := strings.Repeat("ab", 32)
	_, err := process.Load(context.Background(), path, process.Options{SHA256: wrong})
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), sum) {
		t.Fatalf("wrong pin: %v", err)
	}
	if len(childrenRunning(path)) != 0 {
		t.Fatal("a plugin whose digest does not match was started")
	}
	logs := &logBuffer{}
	p := load(t, path, process.Options{SHA256: sum, RestartBackoff: 10 * time.Millisecond, MaxRestartBackoff: 50 * time.Millisecond, Logger: logs.logger()})
	// Replaced on disk, then crashed: the restart refuses the new file.
	copyFile(t, binary(t, builtinPkg), path)
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a refused restart", func() bool {
		err := p.Status()
		return err != nil && strings.Contains(err.Error(), "the executable changed since it was loaded")
	})
	if !errors.Is(p.Status(), process.ErrDown) || len(childrenRunning(path)) != 0 {
		t.Fatalf("status %v, children %v", p.Status(), childrenRunning(path))
	}
}

func TestNotAPlugin(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := process.Load(context.Background(), script, process.Options{StartTimeout: 5 * time.Second}); err == nil ||
		!strings.Contains(err.Error(), "Unrecognized remote plugin message: hello") {
		t.Fatalf("a shell script: %v", err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := process.Load(context.Background(), plain, process.Options{}); err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("a plain file: %v", err)
	}
	if _, err := process.Load(context.Background(), filepath.Join(dir, "missing"), process.Options{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}

func TestCloseStopsTheProcessAndLeaksNothing(t *testing.T) {
	path := binary(t, faultyPkg)
	env := plugintest.NewEnv(t)
	c := env.Capability()
	runtime.GC()
	before := runtime.NumGoroutine()
	fds := 0
	for i := range 5 {
		if i == 1 { // after a first round has opened the connections to Redis
			fds = openFiles(t)
		}
		// The steps socket is opened (and must be closed) only for a plugin
		// that decides in steps.
		p, err := process.Load(context.Background(), path, process.Options{Env: faultModes[i%2].env})
		if err != nil {
			t.Fatal(err)
		}
		cfg := plugintest.Configure(t, p, map[string]any{"limit": 5})
		h := plugintest.Register(t, c, p).Host("close", "s")
		if _, err := decide(p, h, cfg, ""); err != nil {
			t.Fatal(err)
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := decide(p, h, cfg, ""); !errors.Is(err, process.ErrClosed) || !errors.Is(p.Status(), process.ErrClosed) {
			t.Fatalf("after Close: %v, status %v", err, p.Status())
		}
		if err := p.Close(context.Background()); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
	if kids := childrenRunning(path); len(kids) != 0 {
		t.Fatalf("processes left after Close: %v", kids)
	}
	goroutinesSettle(t, before+2)
	filesSettle(t, fds)
}

// filesSettle waits for the test process to have at most max files open
// (go-plugin closes a stopped process's pidfd when it has waited for it).
func filesSettle(t *testing.T, max int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for openFiles(t) > max {
		if time.Now().After(deadline) {
			links := ""
			entries, _ := os.ReadDir("/proc/self/fd")
			for _, e := range entries {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				links += " " + e.Name() + "=" + l
			}
			t.Fatalf("%d files open after Close, want at most %d:%s", openFiles(t), max, links)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openFiles counts the test process's open file descriptors, where
// /proc/self/fd lists them.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Logf("not counting open files: %v", err)
		return 0
	}
	return len(fds)
}

// A plugin that declares steps but does not serve the steps socket it is
// offered fails to start, saying so, instead of timing out every step.
func TestStepsWithoutHelloFailToStart(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the faulty plugin hides its steps socket with dup3, which is Linux's")
	}
	_, err := process.Load(context.Background(), binary(t, faultyPkg),
		process.Options{StartTimeout: 2 * time.Second, Env: []string{"RULED_TEST_STEPS=nohello"}})
	if err == nil || !strings.Contains(err.Error(), "did not say hello on the steps socket") {
		t.Fatalf("Load: %v", err)
	}
	if kids := childrenRunning(binary(t, faultyPkg)); len(kids) != 0 {
		t.Fatalf("processes left after a failed start: %v", kids)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

func digest(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
