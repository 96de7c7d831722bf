package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/redistest"
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
	if _, err := e.Load(path); err != nil {
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
			if _, err := e.Reload(); err == nil {
				t.Fatalf("reload %d: invalid set accepted", i)
			}
			invalid++
		} else {
			replace(t, path, ruleSet(fmt.Sprintf("v%d", i)))
			if _, err := e.Reload(); err != nil {
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
	srv := redistest.Start(t)
	e := newEngine(t, srv, ruleSet("v0"), 5*time.Second)
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	replace(t, path, ruleSet("first"))
	if _, err := e.Load(dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reloads := make(chan error, 10)
	go func() { _ = e.WatchRules(ctx, dir, func(_ int, err error) { reloads <- err }) }()
	time.Sleep(100 * time.Millisecond) // let the watch start
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
	if r := e.RuleInfos(); r[0].Name != "second-one" {
		t.Fatalf("rules after the change: %+v", r)
	}
	replace(t, path, invalidSet)
	waitReload("nosuchfield")
	if r := e.RuleInfos(); r[0].Name != "second-one" {
		t.Fatalf("an invalid change took effect: %+v", r)
	}
}
