package rules_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/rules"
)

// thousandRules is a 1,000-rule set where most rules are per-route limits
// that do not match the benchmark's request: 995 route rules, a CIDR
// exemption, a login rule, a tenant rule, a per-user rule with a dynamic
// limit, and a catch-all per IP. when is the when of the route rules.
func thousandRules(when string) string {
	var b strings.Builder
	b.WriteString(`rules:
  - name: exempt-office
    when: cidr(request.ip, "10.0.0.0/8")
    subject: '"office"'
    plugin: fixedwindow
    config: {limit: 1000, window: 1s}
    stop: true
  - name: login
    when: request.method == "POST" && request.path == "/login"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 1m}
  - name: tenant
    when: attrs["tenant"] == "acme"
    subject: attrs["tenant"] + ":" + request.path
    plugin: fixedwindow
    config: {limit: 50, window: 1s}
`)
	for i := range 995 {
		fmt.Fprintf(&b, "  - {name: route-%d, when: '%s', subject: request.ip, plugin: fixedwindow, config: {limit: %d, window: 1s}}\n",
			i, fmt.Sprintf(when, i), i+1)
	}
	b.WriteString(`  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config: {limit: '=header("x-tier") == "pro" ? 1000 : 200', window: 1m}
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 100, window: 10s}
`)
	return b.String()
}

func benchInput() *rules.Input {
	return &rules.Input{
		Request: rules.Request{
			IP: "203.0.113.7", Method: "GET", Path: "/api/v1/items", Host: "api.example.com", User: "alice",
			Headers: map[string]string{"x-tier": "pro", "accept": "application/json", "user-agent": "bench"},
			Query:   map[string]string{"page": "2"},
		},
		Attrs: map[string]string{"tenant": "acme"},
	}
}

func benchMatch(b *testing.B, when string, want int) {
	s := mustLoad(b, thousandRules(when))
	if n := len(s.Rules()); n != 1000 {
		b.Fatalf("%d rules", n)
	}
	in := benchInput()
	buf := make([]rules.Selection, 0, 8)
	if got := s.AppendMatch(buf, in); len(got) != want {
		b.Fatalf("matched %d rules, want %d", len(got), want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		buf = s.AppendMatch(buf[:0], in)
	}
}

// BenchmarkMatch1000Rules: route rules of the common form
// `request.path == "/route/N" && request.method == "POST"`, which Match
// decides without the expression VM.
func BenchmarkMatch1000Rules(b *testing.B) {
	benchMatch(b, `request.path == "/route/%d" && request.method == "POST"`, 3)
}

// BenchmarkMatch1000RulesVM: route rules no fast path applies to, so each
// runs the expression VM (the worst case).
func BenchmarkMatch1000RulesVM(b *testing.B) {
	benchMatch(b, `len(request.path) > 100 + %d`, 3)
}

// BenchmarkMatch1000RulesParallel is BenchmarkMatch1000Rules from every core.
func BenchmarkMatch1000RulesParallel(b *testing.B) {
	s := mustLoad(b, thousandRules(`request.path == "/route/%d" && request.method == "POST"`))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		in := benchInput()
		buf := make([]rules.Selection, 0, 8)
		for pb.Next() {
			buf = s.AppendMatch(buf[:0], in)
		}
	})
}

// BenchmarkLoad1000Rules measures Parse and Compile of the 1,000-rule set.
func BenchmarkLoad1000Rules(b *testing.B) {
	dir := writeFiles(b, map[string]string{"r.yaml": thousandRules(`request.path == "/route/%d" && request.method == "POST"`)})
	cat := newCatalog()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rules.Load(dir, cat); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMatchLoop: one rule whose when loops over the path's segments,
// each iteration paying the evaluation budget's check.
func BenchmarkMatchLoop(b *testing.B) {
	s := mustLoad(b, `rules:
  - name: admin
    when: 'any(split(request.path, "/"), # == "admin")'
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1s}
`)
	in := benchInput()
	in.Request.Path = "/a/b/c/d/e/f/g/h/admin"
	buf := make([]rules.Selection, 0, 8)
	if got := s.AppendMatch(buf, in); len(got) != 1 {
		b.Fatalf("matched %d rules, want 1", len(got))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		buf = s.AppendMatch(buf[:0], in)
	}
}
