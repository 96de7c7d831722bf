package builtin_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

func builtins() builtin.Catalog { return builtin.NewCatalog() }

// load loads one rule file written from src.
func load(t *testing.T, src string) (*rules.Set, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return rules.Load(path, builtins())
}

// blockHint is what the bucket plugins say about a 0.
const blockHint = "to block a subject, use a fixedwindow rule with limit: 0"

// TestStaticBlocksLoad: limit 0 loads in the plugins with a block form; the
// buckets' 0 is a load error that points to fixedwindow.
func TestStaticBlocksLoad(t *testing.T) {
	_, err := load(t, `rules:
  - {name: fw, subject: request.ip, plugin: fixedwindow, config: {limit: 0, window: 1m}}
  - {name: rl, subject: request.ip, plugin: rolling, config: {limit: 0, window: 1m}}
  - {name: ss, subject: request.ip, plugin: sortedset, config: {limit: 0, window: 1m}}
  - {name: ss-also, subject: request.ip, plugin: sortedset, config: {limit: 5, window: 1m, also: [{limit: 0, window: 1h}]}}
`)
	if err != nil {
		t.Fatalf("blocks refused at load: %v", err)
	}
	_, err = load(t, `rules:
  - {name: tb, subject: request.ip, plugin: tokenbucket, config: {rate: 5, burst: 0}}
  - {name: lk, subject: request.ip, plugin: leaky, config: {capacity: 0, rate: 5}}
`)
	var list rules.ErrorList
	if !errors.As(err, &list) || len(list) != 2 {
		t.Fatalf("bucket plugins with 0: %v, want 2 load errors", err)
	}
	for _, e := range list {
		if !strings.Contains(e.Message, blockHint) {
			t.Errorf("%s: %q lacks %q", e.Rule, e.Message, blockHint)
		}
	}
}

// TestDynamicLimitZeroBlocks: a dynamic value that evaluates to 0 blocks,
// through the rule file, the plugin and real Redis; in the bucket plugins
// it is the request's error, pointing to fixedwindow.
func TestDynamicLimitZeroBlocks(t *testing.T) {
	set, err := load(t, `rules:
  - name: fw
    subject: request.ip
    plugin: fixedwindow
    config: {limit: '=request.headers["x-tier"] == "banned" ? 0 : 100', window: 1m}
  - name: rl
    subject: request.ip
    plugin: rolling
    config: {limit: '=request.headers["x-tier"] == "banned" ? 0 : 100', window: 1m}
  - name: ss
    subject: request.ip
    plugin: sortedset
    config: {limit: 100, window: 1m, also: [{limit: '=request.headers["x-tier"] == "banned" ? 0 : 10', window: 1h}]}
  - name: tb
    subject: request.ip
    plugin: tokenbucket
    config: {rate: 10, burst: '=request.headers["x-tier"] == "banned" ? 0 : 20'}
  - name: lk
    subject: request.ip
    plugin: leaky
    config: {capacity: '=request.headers["x-tier"] == "banned" ? 0 : 20', rate: 10}
`)
	if err != nil {
		t.Fatal(err)
	}
	env := plugintest.NewEnv(t)
	c := env.Capability()
	cat := builtins()
	plugins := map[string]*capabilityPlugin{}
	for name, alg := range cat {
		plugins[name] = &capabilityPlugin{alg: alg, host: plugintest.Register(t, c, alg).Host}
	}
	for _, tier := range []string{"banned", "pro"} {
		in := &rules.Input{Request: rules.Request{IP: "192.0.2.1", Headers: map[string]string{"x-tier": tier}}}
		decided := 0
		for _, sel := range set.Match(in) {
			name := sel.Rule.Plugin
			if name == "tokenbucket" || name == "leaky" {
				if tier == "banned" && (sel.Err == nil || !strings.Contains(sel.Err.Error(), blockHint)) {
					t.Errorf("%s, %s: error %v, want one that says %q", sel.Rule.Name, tier, sel.Err, blockHint)
				}
				if tier == "pro" && sel.Err != nil {
					t.Errorf("%s, %s: %v", sel.Rule.Name, tier, sel.Err)
				}
				continue
			}
			if sel.Err != nil {
				t.Fatalf("%s, %s: %v", sel.Rule.Name, tier, sel.Err)
			}
			p := plugins[name]
			for _, hits := range []int64{1, 0} {
				d, err := p.alg.Decide(context.Background(), p.host(sel.Rule.Name, sel.Subject), sel.Config, sdk.Request{Subject: sel.Subject, Hits: hits})
				if err != nil {
					t.Fatalf("%s, %s: %v", sel.Rule.Name, tier, err)
				}
				blocked := d.Limit == 0 && d.Remaining == 0 && d.Reset > 0 && !d.Allowed && d.RetryAfter == d.Reset
				if blocked != (tier == "banned") {
					t.Errorf("%s, %s, hits %d: %+v, want blocked %v", sel.Rule.Name, tier, hits, d, tier == "banned")
				}
				decided++
			}
		}
		if decided != 6 {
			t.Fatalf("%s: %d decisions, want 2 for each of 3 rules", tier, decided)
		}
	}
}

// capabilityPlugin is an algorithm with the host factory of its
// registration.
type capabilityPlugin struct {
	alg  sdk.Algorithm
	host func(rule, subject string) sdk.Host
}

// TestBlocksStayBlocksLocally: on_error: local with a share of the quota
// keeps limit 0 at 0 in every plugin that has a block form.
func TestBlocksStayBlocksLocally(t *testing.T) {
	cat := builtins()
	for name, raw := range map[string]map[string]any{
		"fixedwindow": {"limit": 0, "window": "1h"},
		"rolling":     {"limit": 0, "window": "1h", "buckets": 6},
		"sortedset":   {"limit": 30, "window": "1h", "also": []any{map[string]any{"limit": 0, "window": "1m"}}},
	} {
		alg := cat[name]
		cfg, err := alg.Configure(raw)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l, err := alg.(sdk.LocalAlgorithm).NewLocal(cfg, 1.0/3)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := 0; i < 10; i++ {
			if d := l.Decide(1_790_000_000_000_000, sdk.Request{Subject: "s", Hits: 1}); d.Allowed || d.Limit != 0 || d.RetryAfter <= 0 {
				t.Fatalf("%s at a third of a block: %+v, want denied with limit 0", name, d)
			}
		}
	}
}
