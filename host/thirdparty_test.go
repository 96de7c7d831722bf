package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// closable is a third-party plugin stand-in: the real fixed-window
// algorithm, counting its Close calls. The loader is what is under test.
type closable struct {
	sdk.Algorithm
	closed *atomic.Int32
}

func (c closable) Close(context.Context) error { c.closed.Add(1); return nil }

func TestThirdPartyPluginsLoadReuseAndRelease(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var loads, closed atomic.Int32
	loader := func(_ context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		if strings.HasSuffix(d.Wasm, "broken.wasm") {
			return nil, errors.New("not a Wasm module")
		}
		loads.Add(1)
		return closable{fixedwindow.New(), &closed}, nil
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: time.Second}),
		Plugins: builtin.All(), LoadPlugin: loader})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const uses = `plugins:
  mine: {wasm: mine.wasm}
rules:
  - name: third
    subject: request.ip
    plugin: mine
    config: {limit: 2, window: 1h}
`
	for _, name := range []string{"mine.wasm", "broken.wasm"} { // the loader does not read them; the engine hashes them
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(uses)
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		check(e, "192.0.2.5")
	}
	keys, _ := srv.Client().Keys(context.Background(), "ruled:mine:third:*").Result()
	if len(keys) == 0 {
		t.Fatal("the third-party plugin's keys are not in its own namespace")
	}
	if res := check(e, "192.0.2.5"); res.Allowed || res.Results[0].Plugin != "mine" {
		t.Fatalf("third-party decision %+v", res.Results)
	}
	// Reloading the same declaration reuses the loaded plugin.
	if _, err := e.Load(context.Background(), path); err != nil || loads.Load() != 1 || closed.Load() != 0 {
		t.Fatalf("reload: err %v, loads %d, closed %d", err, loads.Load(), closed.Load())
	}
	// A broken plugin: positioned error, the old set keeps serving.
	write(strings.Replace(uses, "mine.wasm", "broken.wasm", 1))
	_, err = e.Load(context.Background(), path)
	var list rules.ErrorList
	if !errors.As(err, &list) || !strings.Contains(err.Error(), "rules.yaml:2:") || !strings.Contains(err.Error(), "not a Wasm module") {
		t.Fatalf("broken plugin: %v", err)
	}
	if res := check(e, "192.0.2.6"); len(res.Results) != 1 || res.Results[0].Plugin != "mine" || res.Results[0].Degraded != "" {
		t.Fatalf("old set not serving: %+v", res.Results)
	}
	// A built-in's name cannot be taken.
	write("plugins:\n  fixedwindow: {wasm: x.wasm}\nrules: []\n")
	if _, err := e.Load(context.Background(), path); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("built-in name: %v", err)
	}
	// No rule uses it any more: released after the swap.
	write("rules: []\n")
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if closed.Load() != 1 {
		t.Fatalf("closed %d times, want 1", closed.Load())
	}
}

// thirdPartyEngine is an engine on a real Redis whose loader stands in for
// the Wasm driver with the fixed-window algorithm, counting loads and
// closes.
func thirdPartyEngine(t *testing.T) (e *host.Engine, loads, closed *atomic.Int32) {
	t.Helper()
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	loads, closed = new(atomic.Int32), new(atomic.Int32)
	loader := func(_ context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		loads.Add(1)
		return closable{fixedwindow.New(), closed}, nil
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: time.Second}),
		Plugins: builtin.All(), LoadPlugin: loader})
	if err != nil {
		t.Fatal(err)
	}
	return e, loads, closed
}

// mineRules is a rule file that declares the Wasm plugin "mine" at file,
// with pin (`, sha256: "..."`, or empty), and uses it in one rule.
func mineRules(file, pin string) string {
	return `plugins:
  mine: {wasm: ` + file + pin + `}
rules:
  - name: third
    subject: request.ip
    plugin: mine
    config: {limit: 100, window: 1h}
`
}

// writeFile writes content to the file at path.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestReloadRereadsChangedPluginFiles: a module rebuilt on disk is read
// again at the next reload. When it no longer matches its pin the reload
// fails with a positioned plugin-load error in the engine's status, and
// the old rules and the old plugin keep deciding; with no pin, or the pin
// updated, the new module replaces the old one.
func TestReloadRereadsChangedPluginFiles(t *testing.T) {
	e, loads, closed := thirdPartyEngine(t)
	dir := t.TempDir()
	mod, path := filepath.Join(dir, "mine.wasm"), filepath.Join(dir, "rules.yaml")
	writeFile(t, mod, "module v1")
	writeFile(t, path, mineRules("mine.wasm", `, sha256: "`+sha256Hex([]byte("module v1"))+`"`))
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Reload(context.Background(), "test"); err != nil || loads.Load() != 1 {
		t.Fatalf("reload of an unchanged module: %v, %d loads, want 1", err, loads.Load())
	}

	writeFile(t, mod, "module v2") // rebuilt, the pin not updated
	_, err := e.Reload(context.Background(), "test")
	var list rules.ErrorList
	// The declaration's error, and the rule's that uses the plugin.
	if !errors.As(err, &list) || len(list) != 2 || list[0].Code != rules.CodePluginLoad || list[0].Pos.Line != 2 || list[0].Pos.Column != 3 {
		t.Fatalf("reload of a module that no longer matches its pin: %v, want a plugin-load error at the declaration", err)
	}
	for _, want := range []string{"sha256 mismatch", sha256Hex([]byte("module v1")), sha256Hex([]byte("module v2")), "refusing to load it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	st := e.Status()
	if le := host.LoadErrors(st.LastError); st.Failures != 1 || len(le) != 2 || le[0].Code != rules.CodePluginLoad || le[0].Line != 2 ||
		!strings.Contains(le[0].Message, "sha256 mismatch") {
		t.Fatalf("status %+v (%+v): want the plugin-load error", st, le)
	}
	if loads.Load() != 1 || closed.Load() != 0 {
		t.Fatalf("%d loads, %d closes: the mismatching module was loaded or the serving one closed", loads.Load(), closed.Load())
	}
	if res := check(e, "192.0.2.7"); len(res.Results) != 1 || res.Results[0].Plugin != "mine" || res.Results[0].Degraded != "" || !res.Results[0].Allowed {
		t.Fatalf("old rules and plugin not deciding: %+v", res.Results)
	}

	// The pin updated: the new module is loaded, the old one closed.
	writeFile(t, path, mineRules("mine.wasm", `, sha256: "`+sha256Hex([]byte("module v2"))+`"`))
	if _, err := e.Reload(context.Background(), "test"); err != nil || loads.Load() != 2 || closed.Load() != 1 {
		t.Fatalf("pin updated: %v, %d loads, %d closes; want 2 and 1", err, loads.Load(), closed.Load())
	}
	// No pin: a changed module is loaded again too, an unchanged one not.
	writeFile(t, path, mineRules("mine.wasm", ""))
	if _, err := e.Reload(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	n := loads.Load()
	writeFile(t, mod, "module v3")
	if _, err := e.Reload(context.Background(), "test"); err != nil || loads.Load() != n+1 {
		t.Fatalf("unpinned module changed: %v, %d loads, want %d", err, loads.Load(), n+1)
	}
	if _, err := e.Reload(context.Background(), "test"); err != nil || loads.Load() != n+1 {
		t.Fatalf("unpinned module unchanged: %v, %d loads, want %d", err, loads.Load(), n+1)
	}
}

// TestPluginFilesAreBounded: a plugin declared as /dev/zero, a directory
// or a file over its size cap is refused at once with a positioned
// plugin-load error naming the reason; nothing is read, no plugin loaded.
func TestPluginFilesAreBounded(t *testing.T) {
	e, loads, _ := thirdPartyEngine(t)
	dir := t.TempDir()
	sparse := func(name string, size int64) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, nil, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, size); err != nil { // sparse: nothing written
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ decl, want string }{
		{`{wasm: /dev/zero}`, "/dev/zero: not a regular file (it is a character device)"},
		{`{process: /dev/zero}`, "/dev/zero: not a regular file (it is a character device)"},
		{`{wasm: ` + dir + `}`, "not a regular file (it is a directory)"},
		{`{wasm: ` + sparse("big.wasm", pluginfile.MaxWasm+1) + `}`, "it has 67108865 bytes, a plugin file may have at most 64 MiB"},
		{`{process: ` + sparse("big", pluginfile.MaxExecutable+1) + `}`, "it has 268435457 bytes, a plugin file may have at most 256 MiB"},
	} {
		path := filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(path, []byte("plugins:\n  z: "+tc.decl+"\nrules: []\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := e.Load(context.Background(), path)
		var list rules.ErrorList
		if !errors.As(err, &list) || len(list) != 1 || list[0].Code != rules.CodePluginLoad || list[0].Pos.Line != 2 ||
			!strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a plugin-load error at 2:3 with %q", tc.decl, err, tc.want)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: refused after %v, want at once", tc.decl, took)
		}
	}
	if loads.Load() != 0 {
		t.Fatalf("%d plugins loaded", loads.Load())
	}
}

// TestWatchFollowsPluginFiles: the watcher follows the plugin files the
// rules declare, in their own directories: a module rebuilt there reloads
// the rules (and is loaded again); one that no longer matches its pin
// makes the reload fail, visibly, while the old rules keep deciding; once
// the declaration moves to another directory, that one is followed and
// the old one no longer.
func TestWatchFollowsPluginFiles(t *testing.T) {
	e, loads, _ := thirdPartyEngine(t)
	rulesDir, modDir, otherDir := t.TempDir(), t.TempDir(), t.TempDir()
	mod, path := filepath.Join(modDir, "mine.wasm"), filepath.Join(rulesDir, "rules.yaml")
	writeFile(t, mod, "module v1")
	writeFile(t, path, mineRules(mod, ""))
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	reloads := watcher(t, e, path)

	writeFile(t, mod, "module v2")
	if err := expectReload(t, reloads, "the module rebuilt"); err != nil || loads.Load() != 2 {
		t.Fatalf("module rebuilt: %v, %d loads, want 2", err, loads.Load())
	}
	writeFile(t, path, mineRules(mod, `, sha256: "`+sha256Hex([]byte("module v2"))+`"`))
	if err := expectReload(t, reloads, "the module pinned"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, mod, "module v3") // rebuilt, the pin not updated
	err := expectReload(t, reloads, "the pinned module rebuilt")
	if err == nil || !strings.Contains(err.Error(), "rules.yaml:2:3: plugin \"mine\"") || !strings.Contains(err.Error(), "sha256 mismatch") {
		t.Fatalf("pinned module rebuilt: %v, want the mismatch at the declaration", err)
	}
	if st := e.Status(); st.LastError == nil || host.LoadErrors(st.LastError)[0].Code != rules.CodePluginLoad {
		t.Fatalf("status %+v: want the plugin-load error", st)
	}
	if res := check(e, "192.0.2.8"); len(res.Results) != 1 || res.Results[0].Plugin != "mine" || res.Results[0].Degraded != "" {
		t.Fatalf("old rules not deciding: %+v", res.Results)
	}

	// The declaration moves: the new directory is followed, the old not.
	other := filepath.Join(otherDir, "mine.wasm")
	writeFile(t, other, "module v4")
	writeFile(t, path, mineRules(other, ""))
	if err := expectReload(t, reloads, "the declaration moved"); err != nil {
		t.Fatal(err)
	}
	writeFile(t, mod, "module v5")
	expectNoReload(t, reloads, time.Second, "a file no longer declared")
	writeFile(t, other, "module v6")
	if err := expectReload(t, reloads, "the module in its new directory rebuilt"); err != nil {
		t.Fatal(err)
	}
}

// TestPluginStartedLineOmitsWhatDoesNotApply loads a Wasm and a process
// plugin: each "plugin started" line names the file the plugin has and no
// empty attribute for the other kind.
func TestPluginStartedLineOmitsWhatDoesNotApply(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	loader := func(_ context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		return closable{fixedwindow.New(), new(atomic.Int32)}, nil
	}
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: time.Second}),
		Plugins: builtin.All(), LoadPlugin: loader, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "mine.wasm"), "wasm")
	writeFile(t, filepath.Join(dir, "conc"), "exe")
	path := filepath.Join(dir, "rules.yaml")
	writeFile(t, path, `plugins:
  mine: {wasm: mine.wasm}
  conc: {process: conc}
rules:
  - name: a
    subject: request.ip
    plugin: mine
    config: {limit: 2, window: 1h}
  - name: b
    subject: request.ip
    plugin: conc
    config: {limit: 2, window: 1h}
`)
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	version := fixedwindow.New().Info().Version
	want := map[string]map[string]any{
		"mine": {"level": "INFO", "msg": "plugin started", "plugin": "mine", "wasm": filepath.Join(dir, "mine.wasm"), "version": version},
		"conc": {"level": "INFO", "msg": "plugin started", "plugin": "conc", "process": filepath.Join(dir, "conc"), "version": version},
	}
	var started int
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var got map[string]any
		if err := json.Unmarshal([]byte(l), &got); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if got["msg"] != "plugin started" {
			continue
		}
		started++
		delete(got, "time")
		if w := want[fmt.Sprint(got["plugin"])]; !maps.Equal(got, w) {
			t.Errorf("line %s\nwant the attributes %v", l, w)
		}
	}
	if started != 2 {
		t.Errorf("%d plugin started lines, want 2:\n%s", started, buf.String())
	}
}
