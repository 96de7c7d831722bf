package host_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// subjectRecorder is an Observer that records per-subject decisions.
type subjectRecorder struct {
	mu  sync.Mutex
	got []string
}

func (*subjectRecorder) Decision(string, string, host.Outcome, bool) {}
func (*subjectRecorder) Check(time.Duration, bool)                   {}
func (*subjectRecorder) Reload(error, int)                           {}
func (r *subjectRecorder) SubjectDecision(rule, subject string, o host.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rule+"/"+subject+"/"+string(o))
}

const exemptRules = `rules:
  - name: office
    when: request.ip startsWith "10."
    exempt: true
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1h}
    detailed_metric: true
  - name: per-user
    when: request.user != ""
    subject: request.user
    plugin: fixedwindow
    config: {limit: 5, window: 1h}
    replaces: [per-ip]
`

// TestExemptReplacesAndDetailedMetric: an exempt rule admits without
// counting and ends the evaluation; a rule that replaces another keeps it
// from being decided; a detailed rule's decisions reach the
// SubjectObserver; RuleInfos describes all three.
func TestExemptReplacesAndDetailedMetric(t *testing.T) {
	rec := &subjectRecorder{}
	e := newEngineOpts(t, redistest.Start(t), exemptRules, capability.Options{Timeout: 2 * time.Second},
		func(o *host.Options) { o.Observer = rec })
	ctx := context.Background()
	for range 3 {
		res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: "10.1.1.1"}, Hits: 1})
		if !res.Allowed || len(res.Results) != 1 || !res.Results[0].Exempt || res.Results[0].Rule != "office" {
			t.Fatalf("office: %+v, want allowed by the exempt rule alone", res)
		}
	}
	for i, want := range []bool{true, false} {
		res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: "192.0.2.1"}, Hits: 1})
		if res.Allowed != want || len(res.Results) != 1 || res.Results[0].Rule != "per-ip" {
			t.Fatalf("call %d from 192.0.2.1: %+v, want allowed %v by per-ip", i+1, res, want)
		}
	}
	for range 3 {
		res := e.Check(ctx, &host.CheckRequest{Request: host.Request{IP: "192.0.2.1", User: "alice"}, Hits: 1})
		if !res.Allowed || len(res.Results) != 1 || res.Results[0].Rule != "per-user" {
			t.Fatalf("alice from 192.0.2.1: %+v, want per-user alone (it replaces per-ip)", res)
		}
	}
	rec.mu.Lock()
	got := slices.Clone(rec.got)
	rec.mu.Unlock()
	if want := []string{"per-ip/192.0.2.1/allowed", "per-ip/192.0.2.1/denied"}; !slices.Equal(got, want) {
		t.Fatalf("subject decisions %q, want %q", got, want)
	}
	infos := e.Inspect().RuleInfos()
	if !infos[0].Exempt || infos[0].Plugin != "" || !infos[1].DetailedMetric || !slices.Equal(infos[2].Replaces, []string{"per-ip"}) {
		t.Fatalf("rule infos %+v", infos)
	}
	if n, err := e.Counters().Reset(ctx, "office", "x"); n != 0 || err != nil {
		t.Fatalf("reset of an exempt rule: %d, %v; want nothing to do", n, err)
	}
}

// countingObserver counts checks and outcomes.
type countingObserver struct {
	mu       sync.Mutex
	checks   int
	outcomes []host.Outcome
}

func (o *countingObserver) Decision(_, _ string, out host.Outcome, _ bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, out)
}
func (o *countingObserver) Check(time.Duration, bool) { o.mu.Lock(); o.checks++; o.mu.Unlock() }
func (*countingObserver) Reload(error, int)           {}

// TestDegradedExemptIsNotExempt: an exempt rule whose when cannot be
// evaluated is a degraded decision, counted as one, not an exemption.
func TestDegradedExemptIsNotExempt(t *testing.T) {
	obs := &countingObserver{}
	e := newEngineOpts(t, redistest.Start(t), `rules:
  - name: office
    when: int(attrs["n"]) > 0
    exempt: true
`, capability.Options{Timeout: 2 * time.Second}, func(o *host.Options) { o.Observer = obs })
	res := e.Check(context.Background(), &host.CheckRequest{Attrs: map[string]string{"n": "abc"}, Hits: 1})
	if len(res.Results) != 1 || res.Results[0].Exempt || res.Results[0].Degraded != host.DegradedAllow {
		t.Fatalf("results %+v, want one degraded allow that is not exempt", res.Results)
	}
	if !slices.Equal(obs.outcomes, []host.Outcome{host.OutcomeDegradedAllow}) {
		t.Fatalf("outcomes %v, want degraded_allow", obs.outcomes)
	}
}

// TestCheckEachIsOneCheck: the parts of one request are one check for the
// observer, and every part's rules are decisions.
func TestCheckEachIsOneCheck(t *testing.T) {
	obs := &countingObserver{}
	e := newEngineOpts(t, redistest.Start(t), `rules:
  - name: per-part
    subject: attrs["k"]
    plugin: fixedwindow
    config: {limit: 5, window: 1h}
`, capability.Options{Timeout: 2 * time.Second}, func(o *host.Options) { o.Observer = obs })
	reqs := []*host.CheckRequest{{Attrs: map[string]string{"k": "a"}, Hits: 1}, {Attrs: map[string]string{"k": "b"}, Hits: 1}, {Attrs: map[string]string{"k": "c"}, Hits: 1}}
	for _, res := range e.CheckEach(context.Background(), reqs) {
		if !res.Allowed || len(res.Results) != 1 || res.Results[0].Remaining != 4 {
			t.Fatalf("part %+v, want allowed with 4 remaining", res)
		}
	}
	if obs.checks != 1 || len(obs.outcomes) != 3 {
		t.Fatalf("%d checks and %d decisions observed, want 1 and 3", obs.checks, len(obs.outcomes))
	}
}

// TestResetForgetsTheCachedDenial: after Reset, a subject the deny cache
// held as denied is decided afresh, here and now.
func TestResetForgetsTheCachedDenial(t *testing.T) {
	e := newEngine(t, redistest.Start(t), `rules:
  - name: one
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 1, window: 1h}
`, time.Second)
	ctx := context.Background()
	check(e, "192.0.2.7")
	if res := check(e, "192.0.2.7"); res.Allowed {
		t.Fatal("second request allowed with limit 1")
	}
	if _, err := e.Counters().Reset(ctx, "one", "192.0.2.7"); err != nil {
		t.Fatal(err)
	}
	if res := check(e, "192.0.2.7"); !res.Allowed {
		t.Fatalf("after reset: %+v, want allowed", res)
	}
}
