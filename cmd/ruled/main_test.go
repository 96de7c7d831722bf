package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// badRules has four mistakes: a typo in an expression, an unknown field, a
// duplicate rule name and a bad duration.
const badRules = `rules:
  - name: typo
    subject: request.ipp
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
  - name: unknown-field
    subject: request.ip
    plugin: fixedwindow
    limt: 5
    config: {limit: 5, window: 10s}
  - name: dup
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
  - name: dup
    subject: request.user
    plugin: fixedwindow
    config: {limit: 5, window: 10x}
`

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCheckListsEveryErrorWithItsPosition(t *testing.T) {
	path := writeFile(t, t.TempDir(), "bad.yaml", badRules)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", path}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d, want 1; stderr %s", code, errOut.String())
	}
	got := errOut.String()
	for _, want := range []string{
		"bad.yaml:3:22:", "ipp",
		"bad.yaml:9:5:", "limt",
		"bad.yaml:15:11:", "duplicate",
		"bad.yaml:18:", "window",
		"4 error(s)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("check output lacks %q:\n%s", want, got)
		}
	}
	t.Log(got)
}

func TestServeRefusesBadRulesWithTheSameList(t *testing.T) {
	path := writeFile(t, t.TempDir(), "bad.yaml", badRules)
	var checkOut, serveOut, out bytes.Buffer
	run(context.Background(), []string{"check", path}, &out, &checkOut)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := run(ctx, []string{"serve", "--rules", path, "--listen", "127.0.0.1:0"}, &out, &serveOut); code != 1 {
		t.Fatalf("serve exit %d, want 1", code)
	}
	if !strings.Contains(serveOut.String(), checkOut.String()) {
		t.Fatalf("serve output:\n%s\nlacks the check list:\n%s", serveOut.String(), checkOut.String())
	}
}

// TestServeRefusesBadRulesInJSONLogs: with --log-format json the refusal
// is JSON too, one line per error, so that a log pipeline keeps every one.
func TestServeRefusesBadRulesInJSONLogs(t *testing.T) {
	path := writeFile(t, t.TempDir(), "bad.yaml", badRules)
	var checkOut, serveOut, out bytes.Buffer
	run(context.Background(), []string{"check", path}, &out, &checkOut)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := run(ctx, []string{"serve", "--rules", path, "--listen", "127.0.0.1:0", "--log-format", "json"}, &out, &serveOut); code != 1 {
		t.Fatalf("serve exit %d, want 1", code)
	}
	nErr := 0
	for line := range strings.Lines(serveOut.String()) {
		if err := uniqueKeys(line); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		if strings.Contains(line, `"msg":"rules error"`) {
			nErr++
		}
	}
	if want := strings.Count(checkOut.String(), "bad.yaml:"); nErr != want || want == 0 {
		t.Fatalf("%d rules error lines, want one per error of ruled check (%d):\n%s", nErr, want, serveOut.String())
	}
}

func TestCheckAcceptsTheExamples(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "../../examples/rules"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	want := "../../examples/rules/basic_test.yaml: note: a rule test, not rules: skipped here (ruled test runs it)\n" +
		"ok: 1 rules in ../../examples/rules\n"
	if out.String() != want {
		t.Fatalf("output %q, want %q", out.String(), want)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeWithManagedRedis is the README's demo: ruled started with no
// --redis runs its own redis-server; five checks pass, the sixth gets a 429
// with a Retry-After within the window.
func TestServeWithManagedRedis(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
`)
	addr := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--rules", rules, "--listen", addr, "--data-dir", filepath.Join(dir, "data")}, &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d", code)
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop within 15s")
		}
	})
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
			t.Fatalf("not ready within 15s: %v\n%s", err, errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var codes []int
	var last *http.Response
	for i := 0; i < 6; i++ {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"request": {"ip": "203.0.113.7"}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	if fmt.Sprint(codes) != "[200 200 200 200 200 429]" {
		t.Fatalf("status codes %v", codes)
	}
	ra, err := strconv.Atoi(last.Header.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 10 {
		t.Fatalf("Retry-After %q, want 1..10", last.Header.Get("Retry-After"))
	}
	if got := last.Header.Get("RateLimit-Policy"); got != `"per-ip";q=5;w=10` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
}
