package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

// ruleSet returns a valid rule file whose two rules are named after v.
func ruleSet(v string) string {
	return fmt.Sprintf(`rules:
  - name: %[1]s-one
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
  - name: %[1]s-two
    subject: request.path
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
`, v)
}

const invalidSet = `rules:
  - name: bad-one
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1000000, window: 1h}
  - name: bad-two
    subject: request.nosuchfield
    plugin: fixedwindow
    config: {limit: 1, window: 1h}
`

// replace writes content to path atomically, as editors and Kubernetes do.
func replace(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReloadUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	e := newEngine(t, srv, ruleSet("v0"), 5*time.Second)
	path := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, path, ruleSet("v0"))
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var checks, failures atomic.Int64
	seen := sync.Map{}
	var wg sync.WaitGroup
	for g := 0; g < 6; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "192.0.2.1", Path: "/p"}, Hits: 1})
				checks.Add(1)
				var names []string
				for _, r := range res.Results {
					names = append(names, r.Rule)
					if r.Degraded != "" || !r.Allowed {
						failures.Add(1)
					}
				}
				sort.Strings(names)
				seen.Store(strings.Join(names, ","), true)
			}
		}()
	}
	invalid := 0
	for i := 1; i <= 100; i++ {
		if i%3 == 0 {
			replace(t, path, invalidSet)
			if _, err := e.Reload(context.Background(), "test"); err == nil {
				t.Fatalf("reload %d: invalid set accepted", i)
			}
			invalid++
		} else {
			replace(t, path, ruleSet(fmt.Sprintf("v%d", i)))
			if _, err := e.Reload(context.Background(), "test"); err != nil {
				t.Fatalf("reload %d: %v", i, err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of %d decisions failed or were denied", failures.Load(), checks.Load())
	}
	seen.Range(func(k, _ any) bool {
		names := strings.Split(k.(string), ",")
		if len(names) != 2 || strings.HasPrefix(names[0], "bad") || strings.TrimSuffix(names[0], "-one") != strings.TrimSuffix(names[1], "-two") {
			t.Errorf("a decision saw the rules %v: a half-loaded or invalid set", names)
		}
		return true
	})
	st := e.Status()
	if st.Failures != int64(invalid) || st.Loads != int64(101-invalid)+1 || st.LastError != nil {
		t.Fatalf("status %+v, want %d failures and the last load good", st, invalid)
	}
	t.Logf("%d decisions during 100 reloads (%d invalid)", checks.Load(), invalid)
}

func TestWatchReloadsOnFileReplace(t *testing.T) {
	e, dir, path := servingRules(t, "rules.yaml", true)
	reloads := watcher(t, e, dir)
	waitReload := func(want string) {
		t.Helper()
		select {
		case err := <-reloads:
			if (err == nil) != (want == "") || (err != nil && !strings.Contains(err.Error(), want)) {
				t.Fatalf("reload error %v, want %q", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no reload within 5s")
		}
	}
	replace(t, path, ruleSet("second"))
	waitReload("")
	if r := e.Inspect().RuleInfos(); r[0].Name != "second-one" {
		t.Fatalf("rules after the change: %+v", r)
	}
	replace(t, path, invalidSet)
	waitReload("nosuchfield")
	if r := e.Inspect().RuleInfos(); r[0].Name != "second-one" {
		t.Fatalf("an invalid change took effect: %+v", r)
	}
}

// servingRules returns an engine serving ruleSet("first") from the file
// name in a new directory, loaded from the directory or (dirLoad false)
// the file, with the directory and the file's path.
func servingRules(t *testing.T, name string, dirLoad bool) (*host.Engine, string, string) {
	t.Helper()
	e := newEngine(t, redistest.Start(t), ruleSet("v0"), 5*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, name)
	replace(t, path, ruleSet("first"))
	from := path
	if dirLoad {
		from = dir
	}
	if _, err := e.Load(context.Background(), from); err != nil {
		t.Fatal(err)
	}
	return e, dir, path
}

// watcher runs e.WatchRules on path until the test ends and returns the
// outcomes of its reloads.
func watcher(t *testing.T, e *host.Engine, path string) <-chan error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	reloads := make(chan error, 100)
	go func() {
		defer close(done)
		if err := host.WatchRules(ctx, e, path, func(_ int, err error) { reloads <- err }); err != nil {
			t.Errorf("WatchRules: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	// A change made before the watcher's first scan would be what it
	// compares with, and never reload: wait until it waits for events.
	for deadline := time.Now().Add(10 * time.Second); !watchLoopWaiting(); time.Sleep(5 * time.Millisecond) {
		select {
		case <-done:
			t.Fatal("WatchRules returned at start")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("WatchRules did not wait for events within 10s of starting")
		}
	}
	return reloads
}

// watchLoopWaiting reports whether the goroutine that watcher started
// waits in WatchRules' event loop, the one select of WatchRules: it has
// made its first scan, so that later changes are compared with what was
// there before them. (The watcher offers no other sign that does not
// change what it watches; a test has one watcher at a time.)
func watchLoopWaiting() bool {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	for _, g := range strings.Split(string(buf), "\n\n") {
		// "goroutine 42 [select]:" or "[select, 2 minutes]:", then the
		// innermost frame, the function that selects.
		head, frames, _ := strings.Cut(g, "\n")
		if strings.Contains(head, " [select") && strings.HasPrefix(frames, "github.com/ruled-dev/ruled/host.WatchRules(") &&
			strings.Contains(frames, "\ncreated by github.com/ruled-dev/ruled/host_test.watcher") {
			return true
		}
	}
	return false
}

// expectReload waits for one reload and returns its error.
func expectReload(t *testing.T, reloads <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-reloads:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no reload within 5s", what)
	}
	return nil
}

// expectNoReload fails the test if a reload happens within d.
func expectNoReload(t *testing.T, reloads <-chan error, d time.Duration, what string) {
	t.Helper()
	select {
	case err := <-reloads:
		t.Fatalf("%s: reloaded (err %v)", what, err)
	case <-time.After(d):
	}
}

// scribble appends lines to path until stop is closed, as a log file
// written next to the rules would be: bursts of ten lines 20ms apart, with
// pauses between them (none when pause is 0).
func scribble(t *testing.T, path string, pause time.Duration, stop <-chan struct{}) *sync.WaitGroup {
	t.Helper()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		for i := 0; ; i++ {
			wait := 20 * time.Millisecond
			if i%10 == 0 && pause > 0 {
				wait = pause
			}
			select {
			case <-stop:
				return
			case <-time.After(wait):
				fmt.Fprintf(f, "line %d\n", i)
			}
		}
	}()
	return &wg
}

// TestWatchIgnoresOtherFiles: a log file written again and again next to
// the rule file never reloads the rules, and does not hold back the
// reload of an actual change to them.
func TestWatchIgnoresOtherFiles(t *testing.T) {
	e, dir, path := servingRules(t, "rules.yaml", false)
	loads := e.Status().Loads
	reloads := watcher(t, e, path)
	stop := make(chan struct{})
	// Pauses longer than the watcher's debounce: each burst settles.
	wg := scribble(t, filepath.Join(dir, "ruled.log"), 400*time.Millisecond, stop)
	defer func() { close(stop); wg.Wait() }()
	expectNoReload(t, reloads, 2500*time.Millisecond, "a log file written next to the rules")

	start := time.Now()
	replace(t, path, ruleSet("second")) // the log goes on
	if err := expectReload(t, reloads, "a rule change while the log is written"); err != nil {
		t.Fatal(err)
	}
	if r := e.Inspect().RuleInfos(); r[0].Name != "second-one" {
		t.Fatalf("rules after the change: %+v", r)
	}
	t.Logf("reloaded %v after the change, with the log written meanwhile", time.Since(start))
	expectNoReload(t, reloads, 1500*time.Millisecond, "the log after the reload")
	if st := e.Status(); st.Loads != loads+1 {
		t.Fatalf("%d loads, want %d: one for the change", st.Loads, loads+1)
	}
}

// TestWatchIgnoresUnchangedContent: touching a rule file, writing it again
// with the same content, replacing it with a copy, or adding files that
// are not rule files to the rules directory does not reload; adding a rule
// file does.
func TestWatchIgnoresUnchangedContent(t *testing.T) {
	e, dir, path := servingRules(t, "a.yaml", true)
	loads := e.Status().Loads
	reloads := watcher(t, e, dir)
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(path, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(ruleSet("first")), 0o600); err != nil {
		t.Fatal(err)
	}
	expectNoReload(t, reloads, time.Second, "a rule file touched and written with the same content")
	replace(t, path, ruleSet("first"))
	expectNoReload(t, reloads, time.Second, "a rule file replaced by a copy")
	for _, name := range []string{"notes.txt", ".hidden.yaml", "a.yaml.bak"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(ruleSet("other")), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	expectNoReload(t, reloads, time.Second, "files that are not rule files")

	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("rules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := expectReload(t, reloads, "a rule file added"); err != nil {
		t.Fatal(err)
	}
	if st := e.Status(); st.Loads != loads+1 {
		t.Fatalf("%d loads, want %d: one for the added file", st.Loads, loads+1)
	}
}

// TestWatchReloadsWithinASecondDespiteOtherWrites: events that never settle
// (a log written every 20 ms next to the rules) hold a rule change back by
// at most about a second (docs/rules.md, "Reload": 1 s at most after the
// first event), not for as long as they go on.
func TestWatchReloadsWithinASecondDespiteOtherWrites(t *testing.T) {
	e, dir, path := servingRules(t, "rules.yaml", false)
	reloads := watcher(t, e, path)
	stop := make(chan struct{})
	wg := scribble(t, filepath.Join(dir, "ruled.log"), 0, stop)
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(300 * time.Millisecond) // the writes are under way
	start := time.Now()
	replace(t, path, ruleSet("second"))
	if err := expectReload(t, reloads, "a rule change among continuous writes"); err != nil {
		t.Fatal(err)
	}
	// 1 s plus room for a loaded CI machine; unbounded debouncing would
	// wait until the writes stop (never, here) and fail at 5 s.
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("reloaded %v after the change, want about 1s at most", took)
	}
}

// TestFailedReloadLogsEachError reloads a file with two errors: each is a
// log line of its own with its position and code as attributes, and one
// last line says the previous rules keep serving.
func TestFailedReloadLogsEachError(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	var buf bytes.Buffer
	e, err := host.NewEngine(host.Options{Capability: capability.New(client, capability.Options{Timeout: time.Second}),
		Plugins: builtin.All(), Logger: slog.New(slog.NewJSONHandler(&buf, nil))})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	replace(t, path, ruleSet("v1"))
	if _, err := e.Load(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	replace(t, path, strings.Replace(invalidSet, "window: 1h}\n  - name: bad-two", "window: 1x}\n  - name: bad-two", 1))
	if _, err := e.Reload(context.Background(), "test"); err == nil {
		t.Fatal("the invalid rules reloaded")
	}
	var got []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		delete(m, "time")
		if m["level"] == "ERROR" {
			got = append(got, m)
		}
	}
	if len(got) != 3 {
		t.Fatalf("%d error lines, want 3:\n%s", len(got), buf.String())
	}
	for i, w := range []struct {
		line, col float64
		rule      string
	}{{5, 38, "bad-one"}, {7, 22, "bad-two"}} {
		g := got[i]
		if g["msg"] != "rules reload error" || g["trigger"] != "test" || g["file"] != path || g["line"] != w.line || g["col"] != w.col ||
			g["rule"] != w.rule || g["code"] == "" || g["err"] == "" || strings.Contains(fmt.Sprint(g["err"]), "\n") {
			t.Errorf("error line %d: %v, want %s at line %v col %v with a code and a one-line err", i, g, w.rule, w.line, w.col)
		}
	}
	if s := got[2]; s["msg"] != "rules reload failed; the previous rules keep serving" || s["errors"] != 2.0 || s["trigger"] != "test" {
		t.Errorf("summary line %v", s)
	}
}

// TestLogRuleErrors logs a list error one line per error, leaving out the
// position parts and rule it does not know, and any other error as one.
func TestLogRuleErrors(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	list := rules.ErrorList{
		{Pos: rules.Position{File: "r.yaml", Line: 3}, Code: rules.CodeYAML, Message: "did not find expected key"},
		{Code: rules.CodeRead, Message: "permission denied"},
	}
	if n := host.LogRuleErrors(log, "rules error", list, "k", "v"); n != 2 {
		t.Errorf("logged %d lines for 2 errors", n)
	}
	if n := host.LogRuleErrors(log, "rules error", errors.New("boom")); n != 1 {
		t.Errorf("logged %d lines for one plain error", n)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		delete(m, "time")
		got = append(got, fmt.Sprint(m))
	}
	want := []string{
		"map[code:yaml err:did not find expected key file:r.yaml k:v level:ERROR line:3 msg:rules error]",
		"map[code:read err:permission denied k:v level:ERROR msg:rules error]",
		"map[err:boom level:ERROR msg:rules error]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("lines\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWatchSurvivesAFIFO: a rule file replaced by a FIFO nobody writes
// neither blocks the watcher (it does not hash what is not a regular file)
// nor a reload for good (reading gives up after host.ReadTimeout, and the
// old rules keep serving); a regular file put back is reloaded.
func TestWatchSurvivesAFIFO(t *testing.T) {
	e, dir, path := servingRules(t, "a.yaml", true)
	reloads := watcher(t, e, dir)
	// Made under a name that is no rule file's and renamed over the rule
	// file: the watcher never sees the rule file missing.
	fifo := filepath.Join(dir, "a.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(fifo, path); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reloads:
		if err == nil || !strings.Contains(err.Error(), "reading the rule files") {
			t.Fatalf("the reload of a FIFO: %v, want the read given up", err)
		}
	case <-time.After(host.ReadTimeout + 5*time.Second):
		t.Fatalf("no reload within %v of a rule file replaced by a FIFO", host.ReadTimeout+5*time.Second)
	}
	if st := e.Status(); st.Rules == 0 || st.LastError == nil {
		t.Fatalf("status after the FIFO: %+v, want the old rules serving and the error", st)
	}
	replace(t, path, ruleSet("second"))
	if err := expectReload(t, reloads, "a regular file put back"); err != nil {
		t.Fatal(err)
	}
}

// TestLoadFromMemoryAndReload: rule files made in memory load like files,
// a bad set keeps the old one, and Reload reads the last good source
// again.
func TestLoadFromMemoryAndReload(t *testing.T) {
	e := newEngine(t, redistest.Start(t), ruleSet("v0"), 5*time.Second)
	var reads atomic.Int32
	content := ruleSet("pushed")
	src := host.RuleSource{Origin: "xds://test", Read: func(context.Context) (*rules.Files, error) {
		reads.Add(1)
		return rules.ParseSources([]rules.Source{{Name: "xds:test", Content: []byte(content)}})
	}}
	if _, err := e.LoadFrom(context.Background(), src); err != nil {
		t.Fatal(err)
	}
	if st := e.Status(); st.Path != "xds://test" || st.Rules != 2 {
		t.Fatalf("status %+v, want 2 rules from xds://test", st)
	}
	if _, ok := e.Rules().Rule("pushed-one"); !ok {
		t.Fatal("the pushed rules do not serve")
	}
	bad := host.RuleSource{Origin: "xds://bad", Read: func(context.Context) (*rules.Files, error) {
		return rules.ParseSources([]rules.Source{{Name: "xds:bad", Content: []byte(invalidSet)}})
	}}
	_, err := e.LoadFrom(context.Background(), bad)
	if err == nil || !strings.Contains(err.Error(), "xds:bad:7:22: rule \"bad-two\"") {
		t.Fatalf("loading a bad set: %v, want an error positioned in xds:bad", err)
	}
	if _, ok := e.Rules().Rule("pushed-one"); !ok || e.Status().Path != "xds://test" {
		t.Fatal("a bad set replaced the serving one")
	}
	content = ruleSet("again")
	if _, err := e.Reload(context.Background(), "test"); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Rules().Rule("again-one"); !ok || reads.Load() != 2 {
		t.Fatalf("Reload did not read the last good source again (%d reads)", reads.Load())
	}
}
