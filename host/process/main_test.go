package process_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/sdk"
)

// Plugin executables are built once per test binary into a temporary
// directory (Go's build cache makes rebuilds cheap).
var (
	binDir string
	builds sync.Map // package -> *built
)

type built struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ruled-process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// Packages of the test plugins, relative to this directory.
const (
	faultyPkg      = "./testdata/faulty"
	builtinPkg     = "./testdata/builtin"
	concurrencyPkg = "../../examples/plugins/concurrency"
)

// binary returns the executable of the main package pkg, building it once.
func binary(tb testing.TB, pkg string) string {
	tb.Helper()
	v, _ := builds.LoadOrStore(pkg, &built{})
	b := v.(*built)
	b.once.Do(func() {
		b.path = filepath.Join(binDir, filepath.Base(pkg))
		out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// load starts the plugin at path for one test and closes it at cleanup.
func load(tb testing.TB, path string, opts process.Options) *process.Plugin {
	tb.Helper()
	p, err := process.Load(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("loading %s: %v", path, err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// logBuffer is a concurrency-safe log destination for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitFor polls cond until it holds or d has passed.
func waitFor(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// childrenRunning returns the pids of this process's children running the
// executable at path.
func childrenRunning(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(stat)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[0] == "Z" || fields[1] != strconv.Itoa(os.Getpid()) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == path {
			pids = append(pids, pid)
		}
	}
	return pids
}

// goroutinesSettle waits until at most max goroutines run.
func goroutinesSettle(tb testing.TB, max int) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > max {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			tb.Fatalf("%d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), max, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stubHost answers every Eval with a canned reply. For overhead benchmarks
// only; behaviour is tested against real Redis.
type stubHost struct{ reply sdk.Reply }

func (h *stubHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return h.reply, nil
}
func (h *stubHost) Log(sdk.Level, string) {}
