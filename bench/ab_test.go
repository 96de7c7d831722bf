package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseAB(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ruled")
	if err := os.WriteFile(bin, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	ts, err := parseAB("old=" + bin + ", new=" + bin)
	if err != nil || len(ts) != 2 || ts[0] != (abTarget{"old", bin}) || ts[1].label != "new" {
		t.Fatalf("parseAB: %v, %v", ts, err)
	}
	for in, want := range map[string]string{
		"old=" + bin:                         "at least two",
		"old=" + bin + ",old=" + bin:         `label "old" twice`,
		"old=" + bin + ",new":                "want LABEL=BINARY",
		"old=" + bin + ",new=/no/such/ruled": "new: stat /no/such/ruled",
	} {
		if _, err := parseAB(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAB(%q): %v, want an error with %q", in, err, want)
		}
	}
}

// testRuled is cmd/ruled built once for the package's tests (ruledBinary),
// in a directory TestMain removes.
var testRuled struct {
	once     sync.Once
	dir, bin string
	err      error
}

// serveFloorEnv makes the test binary the protocol floor (-serve-floor),
// as the bench binary is when the envoy mode starts it; its value names
// the HTTP server (-floor-http).
const serveFloorEnv = "BENCH_TEST_SERVE_FLOOR"

func TestMain(m *testing.M) {
	if impl := os.Getenv(serveFloorEnv); impl != "" {
		if err := runFloor(config{floorHTTP: impl}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if testRuled.dir != "" {
		os.RemoveAll(testRuled.dir)
	}
	os.Exit(code)
}

// ruledBinary returns cmd/ruled built for the package's tests.
func ruledBinary(t *testing.T) string {
	t.Helper()
	testRuled.once.Do(func() {
		if testRuled.dir, testRuled.err = os.MkdirTemp("", "bench-ruled-"); testRuled.err != nil {
			return
		}
		testRuled.bin = filepath.Join(testRuled.dir, "ruled")
		if out, err := exec.Command("go", "build", "-o", testRuled.bin, "../cmd/ruled").CombinedOutput(); err != nil {
			testRuled.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if testRuled.err != nil {
		t.Fatal(testRuled.err)
	}
	return testRuled.bin
}

// TestABOverRLS runs the A/B mode over envoy ratelimit's gRPC face with one
// build twice: both start as envoy ratelimit, answer the probe and are
// loaded at once.
func TestABOverRLS(t *testing.T) {
	bin := ruledBinary(t)
	err := runAB(config{ab: "a=" + bin + ",b=" + bin, abRLS: true, conc: 8, rounds: 1, duration: 300 * time.Millisecond, subjects: 3})
	if err != nil {
		t.Fatal(err)
	}
}
