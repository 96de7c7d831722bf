package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer collects the daemon's log while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeObservability: ruled serve exposes /metrics, the status page and
// its stats (loopback, no token), a readiness that covers the plugins, and
// pprof on the debug listener only; it logs the plugins and the status page.
func TestServeObservability(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 10s}
`)
	addr, debug := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var logs lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--rules", rules, "--listen", addr, "--debug-listen", debug,
			"--data-dir", filepath.Join(dir, "data"), "--log-format", "json"}, io.Discard, &logs)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d", code)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop within 15s")
		}
	}
	t.Cleanup(stop)
	base := "http://" + addr
	for deadline := time.Now().Add(15 * time.Second); ; {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 15s:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for range 3 {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"request": {"ip": "203.0.113.9"}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	code, body := httpGet(t, base+"/metrics")
	for _, want := range []string{
		`ruled_decisions_total{outcome="allowed",rule="per-ip"} 2`,
		`ruled_decisions_total{outcome="denied",rule="per-ip"} 1`,
		`ruled_rule_reloads_total{result="ok"} 1`,
		`ruled_redis_up 1`,
		`ruled_build_info{`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if strings.Contains(body, "203.0.113.9") {
		t.Error("/metrics shows a subject")
	}
	if code, body := httpGet(t, base+"/ui/"); code != 200 || !strings.Contains(body, "ruled status") {
		t.Errorf("/ui/: %d", code)
	}
	code, body = httpGet(t, base+"/v1/admin/stats")
	var st struct {
		Redis   string `json:"redis"`
		Ready   string `json:"ready"`
		RedisUp bool   `json:"redis_up"`
		Rules   map[string]struct {
			Outcomes map[string]int `json:"outcomes"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("stats: %d %v %s", code, err, body)
	}
	if !strings.Contains(st.Redis, "managed redis-server") || st.Ready != "" || !st.RedisUp || st.Rules["per-ip"].Outcomes["denied"] != 1 {
		t.Errorf("stats %+v", st)
	}
	if code, body := httpGet(t, "http://"+debug+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof on the debug listener: %d", code)
	}
	if code, _ := httpGet(t, "http://"+debug+"/debug/pprof/cmdline"); code != 200 {
		t.Errorf("pprof cmdline: %d", code)
	}
	if code, _ := httpGet(t, base+"/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("pprof on the API listener: %d, want 404", code)
	}

	stop()
	out := logs.String()
	for _, want := range []string{
		`"msg":"plugin started","plugin":"fixedwindow"`,
		`"msg":"plugin stopped","plugin":"fixedwindow"`,
		`"msg":"status page (loopback, no token)"`,
		`"msg":"pprof serving on the debug listener"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}
