package replay_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/offline/replay"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

func load(t testing.TB, yaml string) *rules.Set {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := rules.Load(path, builtin.NewCatalog())
	if err != nil {
		t.Fatal(err)
	}
	return set
}

const twoRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 5, window: 10s}
  - name: logins
    when: request.path == "/login"
    subject: request.ip
    plugin: fixedwindow
    shadow: true
    config: {limit: 1, window: 1h}
`

var t0 = time.Date(2026, 11, 24, 13, 59, 58, 0, time.UTC)

func at(d time.Duration) int64 { return t0.Add(d).UnixMicro() }

func req(ip, path string) *host.CheckRequest {
	return &host.CheckRequest{Request: rules.Request{IP: ip, Path: path, Method: "GET"}, Hits: 1}
}

func TestReportCountsWhatTheRulesDecide(t *testing.T) {
	r, err := replay.New(load(t, twoRules), replay.Options{Top: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Windows of 10 s begin at 13:59:50, 14:00:00 and 14:00:10. A sends 8
	// requests in its first second, 13:59:58: per-ip denies 3.
	line := 0
	check := func(d time.Duration, q *host.CheckRequest) {
		line++
		r.Check(at(d), line, q)
	}
	for i := range 8 {
		check(time.Duration(i)*100*time.Millisecond, req("192.0.2.1", "/"))
	}
	// B logs in 3 times after 14:00: logins, whose hour began at 14:00,
	// denies twice (shadow: counted, never enforced).
	for _, d := range []time.Duration{2500, 2600, 2700} {
		check(d*time.Millisecond, req("192.0.2.2", "/login"))
	}
	// Line 12, recorded 0.7 s before the one replayed last: replayed at
	// 14:00:00.7.
	check(2*time.Second, req("192.0.2.1", "/"))
	// A new window for A.
	check(12500*time.Millisecond, req("192.0.2.1", "/"))

	rep := r.Report()
	if rep.Checks != 13 || rep.Denied != 3 || rep.OutOfOrder != 1 || rep.MaxStepBack != 0.7 || rep.MaxStepBackLine != 12 ||
		!rep.From.Equal(t0) || !rep.To.Equal(t0.Add(12500*time.Millisecond)) {
		t.Errorf("report %+v", rep)
	}
	if len(rep.Rules) != 2 {
		t.Fatalf("rules %+v", rep.Rules)
	}
	ip, logins := rep.Rules[0], rep.Rules[1]
	if ip.Rule != "per-ip" || ip.Plugin != "fixedwindow" || ip.Shadow || ip.Matched != 13 || ip.Denied != 3 ||
		ip.PeakPerSecond != 8 || !ip.PeakSecond.Equal(t0) || ip.PeakPerMinute != 8 ||
		!ip.PeakMinute.Equal(time.Date(2026, 11, 24, 13, 59, 0, 0, time.UTC)) {
		t.Errorf("per-ip %+v", ip)
	}
	if len(ip.TopSubjects) != 1 || ip.TopSubjects[0] != (replay.SubjectCount{Subject: "192.0.2.1", Denied: 3}) {
		t.Errorf("per-ip top subjects %+v (Top: 1)", ip.TopSubjects)
	}
	if len(ip.TopHours) != 1 || ip.TopHours[0].Denied != 3 || !ip.TopHours[0].Hour.Equal(time.Date(2026, 11, 24, 13, 0, 0, 0, time.UTC)) {
		t.Errorf("per-ip top hours %+v", ip.TopHours)
	}
	if !logins.Shadow || logins.Matched != 3 || logins.Denied != 2 ||
		logins.TopHours[0] != (replay.HourCount{Hour: time.Date(2026, 11, 24, 14, 0, 0, 0, time.UTC), Denied: 2}) {
		t.Errorf("logins %+v", logins)
	}
}

// The replay's totals are the simulator's decisions, counted.
func TestReplayCountsEveryDecision(t *testing.T) {
	set := load(t, twoRules)
	r, err := replay.New(set, replay.Options{Top: 50}) // every subject
	if err != nil {
		t.Fatal(err)
	}
	sim, err := host.NewSimulator(set)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	now := t0.UnixMicro()
	var denied, matched, ruleDenied int64
	for range 20000 {
		now += rng.Int64N(400_000)
		q := req(fmt.Sprint("10.0.0.", rng.IntN(20)), []string{"/", "/login"}[rng.IntN(2)])
		r.Check(now, 0, q)
		res := sim.Check(now, q)
		if !res.Allowed {
			denied++
		}
		for _, rr := range res.Results {
			if rr.Rule == "per-ip" {
				matched++
				if !rr.Allowed {
					ruleDenied++
				}
			}
		}
	}
	rep := r.Report()
	var sum int64
	for _, s := range rep.Rules[0].TopSubjects {
		sum += s.Denied
	}
	if rep.Denied != denied || rep.Rules[0].Matched != matched || rep.Rules[0].Denied != ruleDenied || sum != ruleDenied || denied == 0 {
		t.Errorf("replay denied %d matched %d rule denied %d (subjects %d); simulator %d, %d, %d",
			rep.Denied, rep.Rules[0].Matched, rep.Rules[0].Denied, sum, denied, matched, ruleDenied)
	}
}

// Logs concatenated out of order (cat access.log access.log.1): the
// largest step back in time is reported with its line, not only counted.
func TestReportsTheLargestStepBack(t *testing.T) {
	r, err := replay.New(load(t, twoRules), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r.Check(at(time.Hour), 1, req("192.0.2.1", "/"))
	r.Check(at(time.Hour+time.Second), 2, req("192.0.2.1", "/"))
	r.Check(at(time.Hour), 3, req("192.0.2.1", "/"))             // 1 s back
	r.Check(at(0), 4, req("192.0.2.1", "/"))                     // the next file: 1 h 1 s back
	r.Check(at(time.Second), 5, req("192.0.2.1", "/"))           // still before the latest, by less
	r.Check(at(2*time.Hour), 6, req("192.0.2.1", "/"))           // in order
	r.Check(at(time.Hour+time.Second), 7, req("192.0.2.1", "/")) // a smaller step
	rep := r.Report()
	if rep.OutOfOrder != 4 || rep.MaxStepBack != 3601 || rep.MaxStepBackLine != 4 {
		t.Errorf("out of order %d, max step back %v s at line %d; want 4, 3601 s at line 4",
			rep.OutOfOrder, rep.MaxStepBack, rep.MaxStepBackLine)
	}
}

// With nothing replayed, or a rule that matched nothing, the times are
// null in JSON, not the zero time.
func TestReportTimesAreNullWhenThereAreNone(t *testing.T) {
	r, err := replay.New(load(t, twoRules), replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r.Report())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"from":null`, `"to":null`, `"peak_second":null`, `"peak_minute":null`,
		`"max_step_back_seconds":0`, `"max_step_back_line":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("no checks: %s lacks %s", b, want)
		}
	}
	r.Check(at(0), 1, req("192.0.2.1", "/")) // matches per-ip, not logins
	rep := r.Report()
	b, err = json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if rep.From == nil || !rep.From.Equal(t0) || rep.Rules[0].PeakSecond == nil || rep.Rules[1].PeakSecond != nil ||
		strings.Count(string(b), `"peak_second":null`) != 1 || strings.Contains(string(b), "0001-01-01") {
		t.Errorf("one check: %s", b)
	}
}
