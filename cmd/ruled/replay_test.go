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

	"github.com/ruled-dev/ruled/internal/offline/replay"
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
			rep.Checks != 620 || rep.Denied != 570 || rep.OutOfOrder != 0 || rep.MaxStepBack != 0 || rep.ReadError != "" ||
			rep.From == nil || !rep.From.Equal(replayT0) || rep.To == nil || !rep.To.Equal(replayT0.Add(59*time.Second)) {
			t.Errorf("gzip %v: report %+v", gz, rep)
		}
		r := rep.Rules[0]
		if len(rep.Rules) != 1 || r.Rule != "per-ip" || r.Matched != 620 || r.Denied != 570 ||
			r.PeakPerSecond != 11 || r.PeakSecond == nil || !r.PeakSecond.Equal(replayT0) || r.PeakPerMinute != 620 ||
			len(r.TopSubjects) != 1 || r.TopSubjects[0].Subject != "192.0.2.1" || r.TopSubjects[0].Denied != 570 ||
			len(r.TopHours) != 1 || !r.TopHours[0].Hour.Equal(replayT0) || r.TopHours[0].Denied != 570 {
			t.Errorf("gzip %v: rule %+v", gz, r)
		}
	}
	log := writeSteadyLog(t, false)
	code, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log)
	for _, want := range []string{
		"replayed 620 requests (of 621 lines; 1 skipped) from 2026-11-24T14:00:00Z to 2026-11-24T14:00:59Z (59s): 570 denied (91.9%)\n",
		"  skipped line 313: not a combined log line: missing ",
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
	if rep.Checks != 7 || rep.BadLines != 0 || rep.OutOfOrder != 1 || rep.MaxStepBack != 5.005 || rep.MaxStepBackLine != 7 ||
		rep.Denied != 3 || r.Matched != 7 ||
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
		{[]string{"--rules", "../../examples/rules"}, 2, "ruled replay: --log is required\n\nUsage: ruled replay"},
		{[]string{"--log", log}, 2, "ruled replay: --rules is required\n\nUsage: ruled replay"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--top", "0"}, 2,
			"ruled replay: --top must be at least 1, got 0\n\nUsage: ruled replay"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "extra.log"}, 2,
			"ruled replay: unexpected argument \"extra.log\" (the log is given with --log)\n\nUsage: ruled replay"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--field", "ip="}, 2, `--field: JSON field "ip=": no key named`},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--log-type", "xml"}, 2, "--log-type"},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--field", "nope=x"}, 2, `--field: JSON field "nope=x": unknown field`},
		{[]string{"--rules", "../../examples/rules", "--log", log, "--map", "attrs.x=(("}, 2, "--map"},
		{[]string{"--rules", "../../examples/rules", "--log", filepath.Join(third, "missing.log")}, 2, "missing.log"},
		{[]string{"--rules", third, "--log", log}, 1, "no local model for rules g (plugin gcra)"},
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

// replayJSON runs ruled replay --format json and decodes its output.
func replayJSON(t *testing.T, args ...string) (int, replayOutput, string) {
	t.Helper()
	code, out, errOut := runReplay(t, append(args, "--format", "json")...)
	var rep replayOutput
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("ruled replay %v: exit %d, %v\n%s%s", args, code, err, out, errOut)
	}
	return code, rep, errOut
}

// Two logs concatenated newest first (cat access.log access.log.1): the
// second is replayed at the end of the first, and the report says where
// and how far time went back.
func TestReplayWarnsOfALargeStepBack(t *testing.T) {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	for i := range 10 { // access.log: lines 1-10, 14:00:00 to 14:00:09
		writeCombined(w, "192.0.2.1", replayT0.Add(time.Duration(i)*time.Second), "/")
	}
	// Line 11: 39 s back (a slow request, in a log of request starts).
	writeCombined(w, "192.0.2.2", replayT0.Add(-30*time.Second), "/")
	for i := range 10 { // access.log.1: lines 12-21, an hour before
		writeCombined(w, "192.0.2.1", replayT0.Add(time.Duration(i)*time.Second-time.Hour), "/")
	}
	w.Flush()
	log := writeFile(t, t.TempDir(), "access.log", b.String())
	code, rep, errOut := replayJSON(t, "--rules", "../../examples/rules", "--log", log)
	if code != 0 || rep.OutOfOrder != 11 || rep.MaxStepBack != 3609 || rep.MaxStepBackLine != 12 {
		t.Errorf("exit %d (%s): out of order %d, max step back %v s at line %d; want 11, 3609 s at line 12",
			code, errOut, rep.OutOfOrder, rep.MaxStepBack, rep.MaxStepBackLine)
	}
	_, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log)
	if want := "\nwarning: line 12 goes back 1h0m9s in time (logs concatenated out of order?)"; !strings.Contains(out, want) ||
		!strings.Contains(out, "replay each file separately\n") {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
	// A step back under a minute is reported, without a warning.
	small := strings.Join(strings.SplitAfter(b.String(), "\n")[:11], "")
	log = writeFile(t, t.TempDir(), "access.log", small)
	if _, rep, _ := replayJSON(t, "--rules", "../../examples/rules", "--log", log); rep.MaxStepBack != 39 || rep.MaxStepBackLine != 11 {
		t.Errorf("small step: %v s at line %d, want 39 s at line 11", rep.MaxStepBack, rep.MaxStepBackLine)
	}
	if _, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log); strings.Contains(out, "warning") ||
		!strings.Contains(out, "; 1 out of time order") {
		t.Errorf("small step:\n%s", out)
	}
}

// A skipped line's reason is the whole of it: what the line is not, and
// why.
func TestReplaySkippedLinesSayWhy(t *testing.T) {
	dir := t.TempDir()
	log := writeFile(t, dir, "access.json", fmt.Sprintf(`{"remote_addr": "192.0.2.1", "request_uri": "/"}
{"time": %d, "remote_addr": "192.0.2.1", "request_uri": "/?n=abc"}
{"time": %d, "remote_addr": "192.0.2.1", "request_uri": "/?n=1"}
`, replayT0.Unix(), replayT0.Unix()))
	code, rep, errOut := replayJSON(t, "--rules", "../../examples/rules", "--log", log, "--map", "attrs.n=int(query.n)")
	if code != 0 || rep.Checks != 1 || rep.BadLines != 2 || len(rep.BadExamples) != 2 ||
		rep.BadExamples[0] != (badExample{Line: 1, Reason: "not a json log line: no time field"}) ||
		rep.BadExamples[1].Line != 2 || !strings.HasPrefix(rep.BadExamples[1].Reason, `map "attrs.n=int(query.n)": `) ||
		!strings.Contains(rep.BadExamples[1].Reason, "int(abc)") || strings.Contains(rep.BadExamples[1].Reason, "\n") {
		t.Errorf("exit %d (%s): checks %d, bad %d %+v", code, errOut, rep.Checks, rep.BadLines, rep.BadExamples)
	}
}

// A replay that replays nothing fails, whatever the reason: a CI job
// must not pass on an empty or misread log. The report is still
// printed, with null times.
func TestReplayFailsWhenNothingIsReplayed(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	w := bufio.NewWriter(&b)
	writeCombined(w, "192.0.2.1", replayT0, "/?n=abc")
	writeCombined(w, "192.0.2.1", replayT0, "/")
	w.Flush()
	combined := writeFile(t, dir, "access.log", b.String())
	for _, c := range []struct {
		name    string
		args    []string
		message string
	}{
		{"empty", []string{"--log", writeFile(t, dir, "empty.log", "")}, "empty.log: the log is empty\n"},
		{"blank", []string{"--log", writeFile(t, dir, "blank.log", "\n \n")}, "blank.log: no request replayed: the log's 2 lines are blank\n"},
		{"bad lines", []string{"--log", writeFile(t, dir, "bad.log", "a\nb\n")},
			"bad.log: no request replayed: all 2 non-blank lines were skipped (line 1: not a combined log line: "},
		{"wrong --log-type", []string{"--log", combined, "--log-type", "json"},
			"access.log: no request replayed: all 2 non-blank lines were skipped (line 1: not a json log line: not a JSON object)"},
		{"--map failing everywhere", []string{"--log", combined, "--map", "attrs.n=int(query.n) + 1"},
			`access.log: no request replayed: all 2 non-blank lines were skipped (line 1: map "attrs.n=int(query.n) + 1": `},
	} {
		args := append([]string{"--rules", "../../examples/rules"}, c.args...)
		code, rep, errOut := replayJSON(t, args...)
		if code != 1 || !strings.Contains(errOut, c.message) || rep.Checks != 0 || rep.From != nil || rep.To != nil ||
			rep.Rules[0].PeakSecond != nil || rep.Rules[0].PeakMinute != nil {
			t.Errorf("%s: exit %d, want 1 with %q; stderr %q; report %+v", c.name, code, c.message, errOut, rep)
		}
		if _, out, _ := runReplay(t, args...); !strings.HasPrefix(out, "replayed 0 requests (of ") {
			t.Errorf("%s: text output %q", c.name, out)
		}
	}
	_, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", combined, "--format", "json", "--map", "attrs.n=int(query.n) + 1")
	for _, key := range []string{"from", "to", "peak_second", "peak_minute"} {
		if !strings.Contains(out, `"`+key+`": null`) {
			t.Errorf("JSON lacks %q: null:\n%s", key, out)
		}
	}
}

// lines counts every line read, blank ones too; the text says requests
// for what was replayed.
func TestReplayCountsLinesAndRequests(t *testing.T) {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	writeCombined(w, "192.0.2.1", replayT0, "/")
	fmt.Fprint(w, "\n  \nnot a log line\n")
	writeCombined(w, "192.0.2.1", replayT0.Add(time.Second), "/")
	w.Flush()
	log := writeFile(t, t.TempDir(), "access.log", b.String())
	if code, rep, _ := replayJSON(t, "--rules", "../../examples/rules", "--log", log); code != 0 ||
		rep.Lines != 5 || rep.Checks != 2 || rep.BadLines != 1 {
		t.Errorf("exit %d: lines %d, checks %d, bad %d; want 5, 2, 1", code, rep.Lines, rep.Checks, rep.BadLines)
	}
	_, out, _ := runReplay(t, "--rules", "../../examples/rules", "--log", log)
	if want := "replayed 2 requests (of 5 lines; 1 skipped, 2 blank) from "; !strings.HasPrefix(out, want) {
		t.Errorf("output does not start with %q:\n%s", want, out)
	}
}

// A gzip log cut short (still being written, or truncated): the lines
// before the cut are reported, the error names the file once, and the
// exit status is 1.
func TestReplayTruncatedGzip(t *testing.T) {
	full, err := os.ReadFile(writeSteadyLog(t, true))
	if err != nil {
		t.Fatal(err)
	}
	log := writeFile(t, t.TempDir(), "access.log.gz", string(full[:len(full)*2/3]))
	code, rep, errOut := replayJSON(t, "--rules", "../../examples/rules", "--log", log)
	prefix := fmt.Sprintf("ruled replay: %s: reading line %d: gzip: the data ends early (the file is truncated, or still being written)",
		log, rep.Lines+1)
	if code != 1 || rep.Checks == 0 || rep.Lines >= 621 || !strings.HasPrefix(errOut, prefix) ||
		!strings.HasSuffix(errOut, fmt.Sprintf("; only the %d lines before it were replayed\n", rep.Lines)) ||
		strings.Count(errOut, log) != 1 || !strings.HasPrefix(rep.ReadError, fmt.Sprintf("reading line %d: gzip:", rep.Lines+1)) {
		t.Errorf("exit %d, %d checks of %d lines, read error %q\n%s", code, rep.Checks, rep.Lines, rep.ReadError, errOut)
	}
}

// --log - reads standard input, plain or gzip.
func TestReplayStdin(t *testing.T) {
	for _, gz := range []bool{false, true} {
		data, err := os.ReadFile(writeSteadyLog(t, gz))
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := replayMain(context.Background(), []string{"--rules", "../../examples/rules", "--log", "-", "--format", "json"},
			bytes.NewReader(data), &out, &errOut)
		var rep replayOutput
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil || code != 0 || rep.Lines != 621 || rep.Checks != 620 || rep.Denied != 570 {
			t.Errorf("gzip %v: exit %d, %v, lines %d, checks %d, denied %d\n%s", gz, code, err, rep.Lines, rep.Checks, rep.Denied, errOut.String())
		}
	}
	var out, errOut bytes.Buffer
	code := replayMain(context.Background(), []string{"--rules", "../../examples/rules", "--log", "-"}, strings.NewReader(""), &out, &errOut)
	if code != 1 || errOut.String() != "ruled replay: standard input: the log is empty\n" {
		t.Errorf("empty stdin: exit %d, %q", code, errOut.String())
	}
}

// The common format through the command, and a rule whose subject fails
// on some lines (no user: an empty subject): counted as its errors.
func TestReplayCommonLogAndRuleErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", `rules:
  - name: per-user
    subject: request.user
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
`)
	var b strings.Builder
	for i := range 6 {
		user := []string{"alice", "-", "bob"}[i%3]
		fmt.Fprintf(&b, "192.0.2.%d - %s [%s] \"GET /x HTTP/1.1\" 200 %d\n", i, user, replayT0.Add(time.Duration(i)*time.Second).Format("02/Jan/2006:15:04:05 -0700"), 100+i)
	}
	fmt.Fprintf(&b, "192.0.2.9 - alice [%s] \"GET /x HTTP/1.1\" 200 7\n", replayT0.Add(10*time.Second).Format("02/Jan/2006:15:04:05 -0700"))
	log := writeFile(t, dir, "access.log", b.String())
	code, rep, errOut := replayJSON(t, "--rules", dir, "--log", log, "--log-type", "common")
	r := rep.Rules[0]
	// alice 3 (the third denied), bob 2, and 2 lines without a user.
	if code != 0 || rep.Checks != 7 || rep.BadLines != 0 || r.Matched != 7 || r.Errors != 2 || r.Denied != 1 ||
		len(r.TopSubjects) != 1 || r.TopSubjects[0] != (replay.SubjectCount{Subject: "alice", Denied: 1}) {
		t.Errorf("exit %d (%s): report %+v", code, errOut, rep)
	}
	_, out, _ := runReplay(t, "--rules", dir, "--log", log, "--log-type", "common")
	if want := "rule per-user (fixedwindow): matched 7 (100.0%), would deny 1 (14.3%), expressions failed 2\n"; !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// The worked example of docs/rules.md is this command's output on the
// sample log: the docs cannot drift from what ruled replay prints.
func TestReplayDocsExample(t *testing.T) {
	const command = "$ ruled replay --rules examples/rules --log examples/logs/access.log --top 3"
	doc, err := os.ReadFile("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "\n"+command+"\n")
	if !ok {
		t.Fatalf("docs/rules.md lacks the line %q", command)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok || block == "" {
		t.Fatalf("no output block after %q", command)
	}
	var args []string
	for _, a := range strings.Fields(command)[3:] {
		if strings.HasPrefix(a, "examples/") {
			a = "../../" + a
		}
		args = append(args, a)
	}
	code, out, errOut := runReplay(t, args...)
	if code != 0 || out != block {
		t.Errorf("exit %d (%s); ruled replay %s prints\n%s\ndocs/rules.md shows\n%s", code, errOut, strings.Join(args, " "), out, block)
	}
}
