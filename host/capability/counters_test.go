package capability_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

var timeZero time.Time

// scanCounter counts the SCAN commands a client sends.
type scanCounter struct{ n atomic.Int64 }

func (h *scanCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scanCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.EqualFold(cmd.Name(), "scan") {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *scanCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// writeSubjects gives every subject keys ("counter" and "log") under each
// of rules through p.
func writeSubjects(t *testing.T, p *capability.Plugin, rules, subjects []string) {
	t.Helper()
	for _, s := range subjects {
		for _, rule := range rules {
			if _, err := p.Host(rule, s).Eval(context.Background(), "two", []string{"counter", "log"}); err != nil {
				t.Fatalf("rule %s, subject %q: %v", rule, s, err)
			}
		}
	}
}

// scanAll pages through rule's subjects limit at a time and returns them
// by key form, failing on a subject listed twice within a page.
func scanAll(t *testing.T, p *capability.Plugin, rule string, limit int) (map[string]capability.Subject, int) {
	t.Helper()
	found := map[string]capability.Subject{}
	cursor, pages := "", 0
	for {
		page, err := p.ScanSubjects(context.Background(), rule, cursor, limit)
		if err != nil {
			t.Fatalf("page %d (cursor %q): %v", pages+1, cursor, err)
		}
		pages++
		if len(page.Subjects) > limit+capability.ScanCount {
			t.Fatalf("page %d: %d subjects for a limit of %d", pages, len(page.Subjects), limit)
		}
		inPage := map[string]bool{}
		for _, s := range page.Subjects {
			if inPage[s.Key] {
				t.Fatalf("page %d lists %q twice", pages, s.Key)
			}
			inPage[s.Key] = true
			found[s.Key] = s
		}
		if page.Next == "" {
			return found, pages
		}
		if page.Next == cursor {
			t.Fatalf("page %d: the cursor %q does not move", pages, cursor)
		}
		cursor = page.Next
		if pages > 10000 {
			t.Fatal("the scan does not end")
		}
	}
}

// checkSubjects requires found (by key form) to be exactly subjects, each
// with its name, or marked hashed when its key form is a hash.
func checkSubjects(t *testing.T, found map[string]capability.Subject, subjects []string) {
	t.Helper()
	want := map[string]string{}
	for _, s := range subjects {
		want[capability.EscapeSubject(s)] = s
	}
	for key, s := range found {
		name, ok := want[key]
		if !ok {
			t.Errorf("found %+v, which no subject has", s)
			continue
		}
		if strings.HasPrefix(key, "#") {
			if !s.Hashed || s.Name != key {
				t.Errorf("hashed subject %q found as %+v", key, s)
			}
		} else if s.Hashed || s.Name != name {
			t.Errorf("subject %q found as %+v", name, s)
		}
	}
	for key, name := range want {
		if _, ok := found[key]; !ok {
			t.Errorf("subject %q (%s) not found", name, key)
		}
	}
}

func plainSubjects(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user-%d", i)
	}
	return out
}

// TestScanSubjectsPagesEverySubject lists a rule's subjects, awkward ones
// and hashed ones included, in pages smaller than their number: every
// subject is found with its name, and no other rule's or plugin's.
func TestScanSubjectsPagesEverySubject(t *testing.T) {
	srv := redistest.Start(t)
	c := newCap(t, srv, capability.Options{})
	p, err := c.Register("pl", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Register("pl2", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	subjects := append(plainSubjects(300), awkwardSubjects()...)
	writeSubjects(t, p, []string{"r", "other"}, subjects)
	writeSubjects(t, other, []string{"r"}, []string{"only-under-pl2"})
	writeSubjects(t, p, []string{"r-suffix"}, []string{"only-under-r-suffix"})

	found, pages := scanAll(t, p, "r", 50)
	checkSubjects(t, found, subjects)
	if pages < 2 {
		t.Fatalf("%d subjects in %d page(s) of 50", len(found), pages)
	}
	if all, _ := scanAll(t, p, "r", 1000); len(all) != len(found) {
		t.Fatalf("limit 1000: %d subjects, limit 50: %d", len(all), len(found))
	}

	// A hashed subject's keys are reached through its key form.
	long := strings.Repeat("a", 129)
	key := capability.EscapeSubject(long)
	echo, err := c.Register("echo", []sdk.Script{echoKeys})
	if err != nil {
		t.Fatal(err)
	}
	a := keysOf(t, mustEval(t, echo.Host("r", long), "keys", "counter"))
	b := keysOf(t, mustEval(t, echo.HostForKey("r", key, timeZero), "keys", "counter"))
	if !slices.Equal(a, b) {
		t.Fatalf("HostForKey names %q, Host %q", b, a)
	}

	for _, bad := range []string{"nope!", base64.RawURLEncoding.EncodeToString([]byte("2:0:0")), base64.RawURLEncoding.EncodeToString([]byte("1:-1:0")),
		base64.RawURLEncoding.EncodeToString([]byte("1:0:x"))} {
		if _, err := p.ScanSubjects(context.Background(), "r", bad, 10); !errors.Is(err, capability.ErrBadCursor) {
			t.Errorf("cursor %q: %v, want ErrBadCursor", bad, err)
		}
	}
	// A rule without keys: one empty last page.
	page, err := p.ScanSubjects(context.Background(), "nothing", "", 10)
	if err != nil || len(page.Subjects) != 0 || page.Next != "" {
		t.Fatalf("a rule without keys: %+v, %v", page, err)
	}
}

func mustEval(t *testing.T, h sdk.Host, script string, keys ...string) sdk.Reply {
	t.Helper()
	r, err := h.Eval(context.Background(), script, keys)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestScanSubjectsBoundsItsCost: in a keyspace of many other keys, no page
// sends more than MaxScanCalls SCANs, pages come back short or empty with
// a cursor, and the scan still finds every subject.
func TestScanSubjectsBoundsItsCost(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	fill := srv.Client()
	const others = 30000
	for i := 0; i < others; i += 1000 {
		pairs := make([]any, 0, 2000)
		for j := i; j < i+1000; j++ {
			pairs = append(pairs, fmt.Sprintf("unrelated:%d", j), 1)
		}
		if err := fill.MSet(ctx, pairs...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	scans := &scanCounter{}
	client.AddHook(scans)
	p, err := capability.New(client, capability.Options{}).Register("pl", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	subjects := []string{"x", "y", "z"}
	writeSubjects(t, p, []string{"r"}, subjects)

	found := map[string]capability.Subject{}
	cursor, pages, short := "", 0, 0
	for {
		before := scans.n.Load()
		page, err := p.ScanSubjects(ctx, "r", cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n := scans.n.Load() - before; n > capability.MaxScanCalls {
			t.Fatalf("page %d sent %d SCANs, more than %d", pages+1, n, capability.MaxScanCalls)
		}
		pages++
		if page.Next != "" && len(page.Subjects) < 100 {
			short++
		}
		for _, s := range page.Subjects {
			found[s.Key] = s
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	checkSubjects(t, found, subjects)
	if min := others / (capability.MaxScanCalls * capability.ScanCount); pages < min || short == 0 {
		t.Fatalf("%d pages (%d short with a cursor) over %d keys, want %d or more pages", pages, short, others, min)
	}
}

// TestClearDeletesOnlyTheRulesKeys: Clear removes every key of one rule
// under one plugin, and no other rule's, nor the same rule name's under
// another plugin.
func TestClearDeletesOnlyTheRulesKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{})
	p, err := c.Register("pl", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	other, err := c.Register("pl2", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	subjects := append(plainSubjects(250), awkwardSubjects()...)
	distinct := map[string]bool{}
	for _, s := range subjects {
		distinct[capability.EscapeSubject(s)] = true
	}
	writeSubjects(t, p, []string{"r", "other"}, subjects)
	writeSubjects(t, other, []string{"r"}, []string{"kept"})
	admin := srv.Client()
	before := admin.DBSize(ctx).Val()

	n, err := p.Clear(ctx, "r")
	if err != nil || n != int64(2*len(distinct)) {
		t.Fatalf("Clear: %d, %v; want %d keys", n, err, 2*len(distinct))
	}
	if after := admin.DBSize(ctx).Val(); after != before-n {
		t.Fatalf("%d keys before, %d after deleting %d", before, after, n)
	}
	if page, err := p.ScanSubjects(ctx, "r", "", 1000); err != nil || len(page.Subjects) != 0 {
		t.Fatalf("after Clear: %+v, %v", page, err)
	}
	if found, _ := scanAll(t, p, "other", 1000); len(found) != len(distinct) {
		t.Fatalf("rule other: %d subjects left, want %d", len(found), len(distinct))
	}
	if found, _ := scanAll(t, other, "r", 10); len(found) != 1 {
		t.Fatalf("plugin pl2's rule r: %d subjects left, want 1", len(found))
	}
	if n, err := p.Clear(ctx, "r"); err != nil || n != 0 {
		t.Fatalf("Clear again: %d, %v", n, err)
	}
}

// TestClusterCounters lists and clears a rule's subjects over a 3-master
// Cluster: every master's subjects are found, in pages, and Clear leaves
// the other rule's keys on every master.
func TestClusterCounters(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	ctx := context.Background()
	p, err := newClusterCap(t, cl, nil).Register("pl", []sdk.Script{twoKeys})
	if err != nil {
		t.Fatal(err)
	}
	subjects := append(plainSubjects(200), awkwardSubjects()...)
	writeSubjects(t, p, []string{"r", "other"}, subjects)
	distinct := map[string]bool{}
	perMaster := map[string]int{}
	for _, s := range subjects {
		if k := capability.EscapeSubject(s); !distinct[k] {
			distinct[k] = true
			perMaster[cl.MasterForKey(p.KeyPrefix("r", s)).Addr()]++
		}
	}
	if len(perMaster) != 3 {
		t.Fatalf("subjects on %d masters, want 3: %v", len(perMaster), perMaster)
	}

	found, pages := scanAll(t, p, "r", 40)
	checkSubjects(t, found, subjects)
	if pages < 3 {
		t.Fatalf("%d subjects over 3 masters in %d pages of 40", len(found), pages)
	}

	n, err := p.Clear(ctx, "r")
	if err != nil || n != int64(2*len(distinct)) {
		t.Fatalf("Clear: %d, %v; want %d keys", n, err, 2*len(distinct))
	}
	if found, _ := scanAll(t, p, "r", 1000); len(found) != 0 {
		t.Fatalf("after Clear: %d subjects", len(found))
	}
	if found, _ := scanAll(t, p, "other", 1000); len(found) != len(distinct) {
		t.Fatalf("rule other after Clear: %d subjects, want %d", len(found), len(distinct))
	}
	for _, m := range cl.Masters() {
		if size := m.Client().DBSize(ctx).Val(); size == 0 {
			t.Errorf("master %s lost the other rule's keys", m.Addr())
		}
	}
}
