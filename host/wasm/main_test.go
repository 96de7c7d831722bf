package wasm_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/sdk"
)

// Test modules are built once per test binary into a temporary directory
// (Go's build cache makes rebuilds cheap), and loaded with a compilation
// cache shared by the test binary, so that each module is compiled to
// machine code once per run (seconds per module on a small machine).
// $RULED_WASM_TEST_CACHE names a cache directory to keep between runs
// instead; it grows with every changed module.
var (
	buildDir string
	cacheDir string

	builds sync.Map // package dir -> *built
	loads  sync.Map // key -> *loaded
)

type built struct {
	once sync.Once
	path string
	err  error
}

type loaded struct {
	once sync.Once
	p    *wasm.Plugin
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ruled-wasm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	buildDir = dir
	cacheDir = os.Getenv("RULED_WASM_TEST_CACHE")
	if cacheDir == "" {
		cacheDir = filepath.Join(dir, "cache")
	}
	code := m.Run()
	loads.Range(func(_, v any) bool {
		if l := v.(*loaded); l.p != nil {
			_ = l.p.Close(context.Background())
		}
		return true
	})
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// build builds the Go plugin package at pkg (relative to this directory)
// once per test binary.
func build(pkg string) *built {
	v, _ := builds.LoadOrStore(pkg, &built{})
	b := v.(*built)
	b.once.Do(func() {
		b.path = filepath.Join(buildDir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg)+".wasm")
		b.err = wasm.Build(context.Background(), pkg, b.path)
	})
	return b
}

// module returns the .wasm path of pkg, building it if needed.
func module(tb testing.TB, pkg string) string {
	tb.Helper()
	b := build(pkg)
	if b.err != nil {
		tb.Fatalf("building %s: %v", pkg, b.err)
	}
	return b.path
}

// buildAll builds packages two at a time (the machine has two cores).
func buildAll(pkgs ...string) {
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, pkg := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			build(pkg)
		}()
	}
	wg.Wait()
}

// shared loads the module at pkg once per test binary under key with opts
// (plus the cache directory). Tests must not close it.
func shared(tb testing.TB, key, pkg string, opts wasm.Options) *wasm.Plugin {
	tb.Helper()
	path := module(tb, pkg)
	v, _ := loads.LoadOrStore(key, &loaded{})
	l := v.(*loaded)
	l.once.Do(func() {
		opts.CacheDir = cacheDir
		l.p, l.err = wasm.Load(context.Background(), path, opts)
	})
	if l.err != nil {
		tb.Fatalf("loading %s: %v", pkg, l.err)
	}
	return l.p
}

// fresh loads the module at pkg for one test and closes it at cleanup.
func fresh(tb testing.TB, pkg string, opts wasm.Options) *wasm.Plugin {
	tb.Helper()
	opts.CacheDir = cacheDir
	p, err := wasm.Load(context.Background(), module(tb, pkg), opts)
	if err != nil {
		tb.Fatalf("loading %s: %v", pkg, err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

func pluginPkg(name string) string { return "../../plugins/" + name + "/wasm" }

// stubHost answers every Eval with a canned reply. For overhead benchmarks
// and driver mechanics only; behaviour is tested against real Redis.
type stubHost struct {
	reply sdk.Reply
	logs  chan string
}

func (h *stubHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return h.reply, nil
}

func (h *stubHost) Log(_ sdk.Level, msg string) {
	if h.logs != nil {
		select {
		case h.logs <- msg:
		default:
		}
	}
}

// logRecorder is a slog handler that keeps every record's message and
// attributes as one line.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(ctx context.Context, rec slog.Record) error {
	return (&attrRecorder{r: r}).Handle(ctx, rec)
}

func (r *logRecorder) WithAttrs(as []slog.Attr) slog.Handler { return &attrRecorder{r: r, attrs: as} }
func (r *logRecorder) WithGroup(string) slog.Handler         { return r }

// attrRecorder is a logRecorder with attributes.
type attrRecorder struct {
	r     *logRecorder
	attrs []slog.Attr
}

func (a *attrRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (a *attrRecorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	add := func(at slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", at.Key, at.Value)
		return true
	}
	rec.Attrs(add)
	for _, at := range a.attrs {
		add(at)
	}
	a.r.mu.Lock()
	a.r.lines = append(a.r.lines, b.String())
	a.r.mu.Unlock()
	return nil
}

func (a *attrRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrRecorder{r: a.r, attrs: append(append([]slog.Attr{}, a.attrs...), as...)}
}

func (a *attrRecorder) WithGroup(string) slog.Handler { return a }

// matching returns the recorded lines that contain s.
func (r *logRecorder) matching(s string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}
