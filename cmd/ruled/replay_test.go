package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/replay"
)

func runReplay(t testing.TB, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{"replay"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// replayT0 is the generated logs' first time: a minute and an hour
// boundary, and a 10 s window boundary for basic.yaml's rule.
var replayT0 = time.Date(2026, 11, 24, 14, 0, 0, 0, time.UTC)

// writeSteadyLog writes a combined log of one minute: 192.0.2.1 every
// 100 ms (600 requests), 192.0.2.2 every 3 s (20), in time order, and a
// line that is not a log line. The format logs whole seconds.
func writeSteadyLog(t *testing.T, gz bool) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w *bufio.Writer
	var z *gzip.Writer
	if gz {
		z = gzip.NewWriter(f)
		w = bufio.NewWriter(z)
	} else {
		w = bufio.NewWriter(f)
	}
	for ms := 0; ms < 60_000; ms += 100 {
		at := replayT0.Add(time.Duration(ms) * time.Millisecond)
		if ms%3000 == 0 {
			writeCombined(w, "192.0.2.2", at, "/b")
		}
		writeCombined(w, "192.0.2.1", at, "/a")
		if ms == 30_000 {
			fmt.Fprintln(w, "not a log line")
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if z != nil {
		if err := z.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

func writeCombined(w *bufio.Writer, ip string, at time.Time, path string) {
	fmt.Fprintf(w, "%s - - [%s] \"GET %s HTTP/1.1\" 200 512 \"-\" \"curl/8.5\"\n", ip, at.Format("02/Jan/2006:15:04:05 -0700"), path)
}

func TestReplayReportsWhatBasicRulesWouldDeny(t *testing.T) {
	for _, gz := range []bool{false, true} {
		log := writeSteadyLog(t, gz)
		code, out, errOut := runReplay(t, "--rules", "../../examples/rules", "--log", log, "--format", "json")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		var rep replayOutput
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		// 5 per 10 s per IP: 192.0.2.1 gets 5 of each window's 100, so 570
		// of its 600 are denied over 6 windows; 192.0.2.2 never is.
		if rep.Lines != 621 || rep.BadLines != 1 || len(rep.BadExamples) != 1 || rep.BadExamples[0].Line != 313 ||
			rep.Checks != 620 || rep.Denied != 570 || rep.OutOfOrder != 0 ||
			!rep.From.Equal(replayT0) || !rep.To.Equal(replayT0.Add(59*time.Second)) {
			t.Errorf("gzip %v: report %+v", gz, rep)
		}
		r := rep.Rules[0]
		if len(rep.Rules) != 1 || r.Rule != "per-ip" || r.Matched != 620 || r.Denied != 570 ||
			r.PeakPerSecond != 11 || !r.PeakSecond.Equal(replayT0) || r.PeakPerMinute != 620 ||
			len(r.TopSubjects) != 1 || r.TopSubjects[0].Subject != "192.0.2.1" || r.TopSubjects[0].Denied != 570 ||
			len(r.TopHours) != 1 || !r.TopHours[0].Hour.Equal(replayT0) || r.TopHours[0].Denied != 570 {
			t.Errorf("gzip %v: rule %+v", gz, r)
		}
	}
	log := writeSteadyLog(t, false)
	code, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log)
	for _, want := range []string{
		"replayed 620 lines (1 more skipped: bad lines) from 2026-11-24T14:00:00Z to 2026-11-24T14:00:59Z (59s): 570 denied (91.9%)\n",
		"  skipped line 313: ",
		"rule per-ip (fixedwindow): matched 620 (100.0%), would deny 570 (91.9%)\n",
		"  peak 11/s at 2026-11-24T14:00:00Z, 620/min at 2026-11-24T14:00:00Z\n",
		"  most denied: \"192.0.2.1\" 570\n",
		"  denials by hour (UTC), most first: 2026-11-24T14Z 570 (100.0%)\n",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
}

// A JSON log with its own key names, and a rule on an attribute --map
// takes from the line.
func TestReplayJSONLogWithFieldsAndMaps(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", `rules:
  - name: per-tenant
    when: attrs.tenant != ""
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
`)
	var b strings.Builder
	for i := range 6 {
		tenant := []string{"acme", "globex"}[i%2]
		fmt.Fprintf(&b, `{"ts": %d.%03d, "client": "192.0.2.%d", "verb": "GET", "uri": "/x", "tenant_id": "%s"}`+"\n",
			replayT0.Unix()+int64(i), i, i, tenant)
	}
	// A line whose time is before the last one's: replayed at the later time.
	fmt.Fprintf(&b, `{"ts": %d, "client": "192.0.2.9", "verb": "GET", "uri": "/x", "tenant_id": "acme"}`+"\n", replayT0.Unix())
	log := writeFile(t, dir, "access.json", b.String())
	code, out, errOut := runReplay(t, "--rules", dir, "--log", log, "--log-type", "json", "--field", "time=ts",
		"--field", "ip=client", "--field", "method=verb", "--map", "attrs.tenant=fields.tenant_id", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var rep replayOutput
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Rules[0]
	if rep.Checks != 7 || rep.BadLines != 0 || rep.OutOfOrder != 1 || rep.Denied != 3 || r.Matched != 7 ||
		len(r.TopSubjects) != 2 || r.TopSubjects[0] != (replay.SubjectCount{Subject: "acme", Denied: 2}) || r.TopSubjects[1] != (replay.SubjectCount{Subject: "globex", Denied: 1}) {
		t.Errorf("report %+v", rep)
	}
}

func TestReplayRefusals(t *testing.T) {
	log := writeSteadyLog(t, false)
	third := t.TempDir()
	exe := writeFile(t, third, "gcra", "#!/bin/sh\nexit 1\n")
	if err := os.Chmod(exe, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, third, "rules.yaml", "plugins:\n  gcra: {process: ./gcra}\nrules:\n  - {name: g, subject: request.ip, plugin: gcra, config: {}}\n")
	for _, c := range []struct {
		args    []string
		code    int
		message string
	}{
		{[]string{"--rules", "../../examples/rules"}, 2, "Usage: ruled replay"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--top", "0"}, 2, "Usage: ruled replay"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--log-type", "xml"}, 2, "--log-type"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--field", "nope=x"}, 2, "--field nope=x"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--map", "attrs.x=(("}, 2, "--map"},
		{[]string{"--rules", "../../examples/rules", "--log", filepath.Join(third, "missing.log")}, 2, "missing.log"},
		{[]string{"--rules", third, "--log", log}, 1, "no reference model for rules g (plugin gcra)"},
		{[]string{"--rules", filepath.Join(third, "none.yaml"), "--log", log}, 1, "none.yaml"},
	} {
		code, out, errOut := runReplay(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.message) {
			t.Errorf("ruled replay %v: exit %d, want %d with %q\n%s%s", c.args, code, c.code, c.message, out, errOut)
		}
	}
}

// BenchmarkReplayMillionLines replays a generated combined log of 1M
// lines (a day of traffic from 20,000 addresses, 50 users, 6 routes)
// through the cookbook's rules: the whole of ruled replay, reading,
// mapping, matching and deciding. The target is under 10 s a million
// lines on a 2-core machine (docs/performance.md).
func BenchmarkReplayMillionLines(b *testing.B) {
	const lines = 1_000_000
	path := filepath.Join(b.TempDir(), "access.log")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	routes := []string{"GET /", "POST /login", "GET /api/items?page=2", "GET /api/search?q=shoes", "GET /api/export", "GET /healthz"}
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	for range lines {
		at = at.Add(time.Duration(rng.IntN(172_800)) * time.Microsecond) // 86.4 ms on average: a day
		ip := fmt.Sprintf("198.51.%d.%d", rng.IntN(80), rng.IntN(250))
		user := "-"
		if rng.IntN(3) == 0 {
			user = fmt.Sprintf("user%d", rng.IntN(50))
		}
		fmt.Fprintf(w, "%s - %s [%s] \"%s HTTP/1.1\" 200 %d \"https://example.com/\" \"Mozilla/5.0 (X11; Linux x86_64)\"\n",
			ip, user, at.Format("02/Jan/2006:15:04:05 -0700"), routes[rng.IntN(len(routes))], rng.IntN(5000))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	b.ResetTimer()
	for b.Loop() {
		if code, out, errOut := runReplay(b, "--rules", "../../examples/rules/cookbook", "--log", path, "--format", "json"); code != 0 ||
			!strings.Contains(out, `"checks": 1000000`) {
			b.Fatalf("exit %d: %s", code, errOut)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/1M-lines")
}

// Bad lines are skipped and counted; the first five are listed.
func TestReplayListsTheFirstFiveBadLines(t *testing.T) {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	for i := range 9 {
		writeCombined(w, "192.0.2.1", replayT0.Add(time.Duration(i)*time.Second), "/")
		fmt.Fprintf(w, "garbage %d\n", i)
	}
	w.Flush()
	log := writeFile(t, t.TempDir(), "access.log", b.String())
	code, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log, "--format", "json")
	var rep replayOutput
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if rep.Lines != 18 || rep.Checks != 9 || rep.BadLines != 9 || len(rep.BadExamples) != 5 ||
		rep.BadExamples[0].Line != 2 || rep.BadExamples[4].Line != 10 || rep.BadExamples[0].Reason == "" {
		t.Errorf("lines %d checks %d bad %d examples %+v", rep.Lines, rep.Checks, rep.BadLines, rep.BadExamples)
	}
}
