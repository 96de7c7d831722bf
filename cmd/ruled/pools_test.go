package main

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// poolInstances returns the value of ruled_plugin_pool_instances for
// plugin and state in the server's /metrics, and whether it is there.
func (s *server) poolInstances(t *testing.T, plugin, state string) (float64, bool) {
	t.Helper()
	code, body := httpGet(t, s.base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	re := regexp.MustCompile(`(?m)^ruled_plugin_pool_instances\{plugin="` + regexp.QuoteMeta(plugin) +
		`",state="` + regexp.QuoteMeta(state) + `"\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("ruled_plugin_pool_instances %q: %v", m[0], err)
	}
	return v, true
}

// waitIdle waits until /metrics shows idle instances of plugin (the
// driver refills its pool in the background after a call).
func (s *server) waitIdle(t *testing.T, plugin string) float64 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		v, ok := s.poolInstances(t, plugin, "idle")
		if ok && v > 0 {
			if _, ok := s.poolInstances(t, plugin, "busy"); !ok {
				t.Fatalf("plugin %s: an idle series and no busy one", plugin)
			}
			return v
		}
		if time.Now().After(deadline) {
			_, body := httpGet(t, s.base+"/metrics")
			t.Fatalf("no positive ruled_plugin_pool_instances{plugin=%q,state=\"idle\"} within 10s (present: %v):\n%s", plugin, ok, grepLines(body, "ruled_plugin_pool"))
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// replaceFile writes content to path through a rename, so that the rule
// watcher never reads half a file.
func replaceFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// waitLoads waits until the rules have loaded n times, successfully.
func (s *server) waitLoads(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, body := httpGet(t, s.base+"/v1/admin/rules")
		var a struct {
			Status struct {
				Loads    int `json:"loads"`
				Failures int `json:"failures"`
			} `json:"status"`
		}
		if err := json.Unmarshal([]byte(body), &a); err != nil {
			t.Fatalf("GET /v1/admin/rules: %v\n%s", err, body)
		}
		if a.Status.Failures > 0 {
			t.Fatalf("a reload failed:\n%s\n%s", body, s.logs.String())
		}
		if a.Status.Loads >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d loads within 20s, want %d:\n%s", a.Status.Loads, n, s.logs.String())
		}
	}
}

// TestServeReportsWasmPoolInstances serves the gcra example as a Wasm
// plugin and finds its instance pool in /metrics; a reload that loads the
// module again from another file keeps it reported (the new module's), and
// a reload without the plugin removes it.
func TestServeReportsWasmPoolInstances(t *testing.T) {
	dir := t.TempDir()
	mod := filepath.Join(dir, "gcra.wasm")
	buildPlugin(t, "../../examples/plugins/gcra/wasm", mod)
	sum := fileSHA256(t, mod)
	b, err := os.ReadFile(mod)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "gcra2.wasm", string(b)) // the same module under another path: loaded again
	first := gcraRules(t, sum)
	rules := writeFile(t, dir, "rules.yaml", first)
	s := startServe(t, dir, "--rules", rules)

	if r := s.check(t, `{"request": {"user": "alice"}}`); r.status != http.StatusOK || len(r.Results) != 1 || r.Results[0].Plugin != "gcra" {
		t.Fatalf("gcra does not decide: %+v", r)
	}
	s.waitIdle(t, "gcra")

	// The engine loads the module from gcra2.wasm before it closes the one
	// from gcra.wasm: closing the old must not take the metric away.
	second := strings.Replace(first, "./gcra.wasm", "./gcra2.wasm", 1)
	if second == first {
		t.Fatal("the rules do not name ./gcra.wasm")
	}
	replaceFile(t, rules, second)
	s.waitLoads(t, 2)
	if n := strings.Count(s.logs.String(), `msg="plugin stopped" plugin=gcra`); n != 1 {
		t.Fatalf("the first module was stopped %d times after the reload, want once:\n%s", n, s.logs.String())
	}
	if r := s.check(t, `{"request": {"user": "alice"}}`); r.status != http.StatusOK || len(r.Results) != 1 {
		t.Fatalf("the reloaded gcra does not decide: %+v", r)
	}
	s.waitIdle(t, "gcra")

	// Without the plugin, its pool is no longer reported.
	replaceFile(t, rules, `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 10s}
`)
	s.waitLoads(t, 3)
	for _, state := range []string{"idle", "busy"} {
		if v, ok := s.poolInstances(t, "gcra", state); ok {
			t.Errorf("gcra unloaded, /metrics still has its %s instances (%v)", state, v)
		}
	}
}
