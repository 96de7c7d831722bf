// Package assemblyscript_test builds the AssemblyScript plugin in this directory with npm and tests
// it through ruled's Wasm driver (host/wasm): the same decisions as the native plugins/fixedwindow on
// a real Redis, the same config errors, memory that stays flat, and malformed input refused.
package assemblyscript_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/sdk"
)

// The module is built once per test binary, with `npm ci` and `npm run build`, into a temporary
// directory; wazero compiles it with a compilation cache shared by the test binary.
var (
	tmpDir   string
	asModule string // the AssemblyScript module
	cacheDir string

	goBuild struct { // the Go plugins/fixedwindow as Wasm, built on first use (benchmark)
		once sync.Once
		path string
		err  error
	}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "ruled-as-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tmpDir, cacheDir = dir, filepath.Join(dir, "cache")
	asModule = filepath.Join(dir, "fixedwindow-as.wasm")
	if err := buildModule(asModule); err != nil {
		// Not a skip: CI installs node and npm (scripts/deps.sh test).
		fmt.Fprintf(os.Stderr, "building the AssemblyScript module: %v\n", err)
		return 1
	}
	return m.Run()
}

// buildModule runs `npm ci` and `npm run build -- --out out` in this directory.
func buildModule(out string) error {
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("needs node and npm (scripts/deps.sh test installs them): %w", err)
	}
	for _, args := range [][]string{
		{"ci", "--no-audit", "--no-fund"},
		{"run", "build", "--", "--out", out},
	} {
		cmd := exec.Command(npm, args...)
		var output bytes.Buffer
		cmd.Stdout, cmd.Stderr = &output, &output
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("npm %s: %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(output.String()))
		}
	}
	return nil
}

// goModule returns the Go plugins/fixedwindow built as a Wasm module (sdk/guest), building it on
// first use.
func goModule(tb testing.TB) string {
	tb.Helper()
	goBuild.once.Do(func() {
		goBuild.path = filepath.Join(tmpDir, "fixedwindow-go.wasm")
		goBuild.err = wasm.Build(context.Background(), "../../../plugins/fixedwindow/wasm", goBuild.path)
	})
	if goBuild.err != nil {
		tb.Fatal(goBuild.err)
	}
	return goBuild.path
}

// load loads the module at path for one test and closes it at cleanup. Calls get 10 s, not 1 s:
// the shared 2-core machines that run the tests stall now and then.
func load(tb testing.TB, path string, opts wasm.Options) *wasm.Plugin {
	tb.Helper()
	opts.CacheDir = cacheDir
	if opts.CallTimeout == 0 {
		opts.CallTimeout = 10 * time.Second
	}
	p, err := wasm.Load(context.Background(), path, opts)
	if err != nil {
		tb.Fatalf("loading %s: %v", path, err)
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// stubHost answers every Eval with a canned reply or error. For the driver's own cost and for
// mechanics; behaviour is tested against real Redis.
type stubHost struct {
	reply sdk.Reply
	err   error
}

func (h *stubHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return h.reply, h.err
}

func (h *stubHost) Log(sdk.Level, string) {}
