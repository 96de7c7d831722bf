package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/rules"
)

// TestServeRunsProcessPlugins serves a rule file that declares the
// concurrency example as a process plugin, pinned by its digest, and checks
// that stopping ruled stops the plugin process.
func TestServeRunsProcessPlugins(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "concurrency")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/plugins/concurrency").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rulesPath := writeFile(t, dir, "rules.yaml", `plugins:
  conc: {process: ./concurrency, sha256: "`+fileSHA256(t, bin)+`"}
rules:
  - name: one-at-a-time
    subject: request.user
    plugin: conc
    config: {limit: 1, ttl: 1m}
    deny_cache: false
`)
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--rules", rulesPath, "--listen", addr, "--data-dir", filepath.Join(dir, "data")}, &out, &errOut)
	}()
	base := "http://" + addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("not ready within 15s: %v\n%s", err, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(pluginProcesses(bin)) != 1 {
		t.Fatalf("plugin processes %v, want 1", pluginProcesses(bin))
	}
	var codes []int
	for _, body := range []string{`"hits": 1, "dedup_id": "a"`, `"hits": 1, "dedup_id": "b"`, `"hits": -1, "dedup_id": "a"`, `"hits": 1, "dedup_id": "b"`} {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"request": {"user": "u"}, `+body+`}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
	}
	if want := []int{200, 429, 200, 200}; !slices.Equal(codes, want) {
		t.Fatalf("status codes %v, want %v\n%s", codes, want, errOut.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d\n%s", code, errOut.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop within 15s")
	}
	if kids := pluginProcesses(bin); len(kids) != 0 {
		t.Fatalf("plugin processes left after ruled stopped: %v", kids)
	}
}

// TestPluginLoaderChecksPins refuses a Wasm module whose digest differs from
// the pin before loading it.
func TestPluginLoaderChecksPins(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "x.wasm", "not a module")
	wopts, _ := wasmOptions(slog.New(slog.DiscardHandler), pluginCallTimeout(0), "")
	load := pluginLoader(slog.New(slog.DiscardHandler), wopts, nil)
	wrong := strings.Repeat("1", 64)
	_, err := load(context.Background(), rules.PluginDecl{Name: "x", Wasm: path, SHA256: wrong})
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") || !strings.Contains(err.Error(), wrong) ||
		!strings.Contains(err.Error(), fileSHA256(t, path)) {
		t.Fatalf("wrong pin: %v", err)
	}
	_, err = load(context.Background(), rules.PluginDecl{Name: "x", Wasm: path, SHA256: fileSHA256(t, path)})
	if err == nil || strings.Contains(err.Error(), "sha256") {
		t.Fatalf("right pin, not a module: %v", err)
	}
	_, err = load(context.Background(), rules.PluginDecl{Name: "x", Process: path, SHA256: wrong})
	if err == nil || !strings.Contains(err.Error(), "not an executable") {
		t.Fatalf("process that is not executable: %v", err)
	}
}

// TestPluginFilesAreBounded: the loader (serve and check use it) refuses
// at once, with the reason, a plugin file that is not a regular file or is
// larger than its cap, rather than reading it without end.
func TestPluginFilesAreBounded(t *testing.T) {
	dir := t.TempDir()
	big := writeFile(t, dir, "big.wasm", "")
	if err := os.Truncate(big, pluginfile.MaxWasm+1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	wopts, _ := wasmOptions(slog.New(slog.DiscardHandler), pluginCallTimeout(0), "")
	load := pluginLoader(slog.New(slog.DiscardHandler), wopts, nil)
	for _, tc := range []struct {
		decl rules.PluginDecl
		want string
	}{
		{rules.PluginDecl{Name: "z", Wasm: "/dev/zero"}, "/dev/zero: not a regular file (it is a character device)"},
		{rules.PluginDecl{Name: "z", Process: "/dev/zero"}, "/dev/zero: not a regular file (it is a character device)"},
		{rules.PluginDecl{Name: "z", Wasm: big}, "a plugin file may have at most 64 MiB"},
	} {
		start := time.Now()
		if _, err := load(context.Background(), tc.decl); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.decl, err, tc.want)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%+v: refused after %v, want at once", tc.decl, took)
		}
	}
	// ruled check, end to end.
	path := writeFile(t, dir, "rules.yaml", "plugins:\n  z: {wasm: /dev/zero}\nrules: []\n")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"check", path}, io.Discard, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), path+`:2:3: plugin "z": /dev/zero: not a regular file`) {
		t.Fatalf("check: exit %d\n%s", code, stderr.String())
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// pluginProcesses returns the pids of live processes running the
// executable at path.
func pluginProcesses(path string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if s := string(stat); s == "" || strings.Fields(s[strings.LastIndexByte(s, ')')+1:])[0] == "Z" {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if arg0, _, _ := strings.Cut(string(cmdline), "\x00"); arg0 == path {
			pids = append(pids, pid)
		}
	}
	return pids
}
