package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRuleTestsStopWhenInterrupted: ruled test, sent SIGINT or SIGTERM in
// the middle of a run, stops at the case it is in (within a second:
// interruptGrace, plus what a file takes on this machine), says so on its
// last line and exits with the signal's status, where it once ran on
// until SIGKILL.
func TestRuleTestsStopWhenInterrupted(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", "rules:\n  - {name: r, subject: request.ip, plugin: fixedwindow, config: {limit: 5, window: 10s}}\n")
	const files = 40
	for i := range files {
		writeFile(t, dir, fmt.Sprintf("f%02d_test.yaml", i),
			"tests:\n  - {name: many, steps: [{request: {ip: 192.0.2.1}, repeat: 1000000}]}\n")
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		cmd := exec.Command(buildRuled(t), "test", dir)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var errOut bytes.Buffer
		cmd.Stderr = &errOut
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := bufio.NewScanner(stdout)
		if !lines.Scan() { // the first file is done
			t.Fatalf("no output: %s", errOut.String())
		}
		perFile := time.Since(start)
		sent := time.Now()
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		var rest []string
		for lines.Scan() {
			rest = append(rest, lines.Text())
		}
		_ = cmd.Wait()
		took := time.Since(sent)
		if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
			t.Errorf("%s: exit %d, want %d\n%s", signalName(sig), code, 128+int(sig), errOut.String())
		}
		if bound := interruptGrace + perFile; took > bound {
			t.Errorf("%s: stopped %v after the signal, want within %v", signalName(sig), took, bound)
		}
		last := ""
		if len(rest) > 0 {
			last = rest[len(rest)-1]
		}
		if want := "interrupted by " + signalName(sig) + ", the cases after it did not run"; !strings.Contains(last, want) {
			t.Errorf("%s: last line %q, want it to say %q", signalName(sig), last, want)
		}
		if ran := strings.Count(strings.Join(rest, "\n"), "many ("); ran+1 >= files {
			t.Errorf("%s: %d of %d files ran after the signal", signalName(sig), ran, files)
		}
	}
}

// TestReplayStopsWhenInterrupted: ruled replay reading a log that never
// ends (standard input held open) exits with SIGTERM's status within
// interruptGrace of it, plus what a short replay takes here, and says
// that its output is incomplete.
func TestReplayStopsWhenInterrupted(t *testing.T) {
	bin := buildRuled(t)
	log := "203.0.113.1 - - [05/Jan/2026:00:00:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"\n"
	// The baseline: a replay of one line, start to exit.
	start := time.Now()
	base := exec.Command(bin, "replay", "--rules", "../../examples/rules", "--log", "-")
	base.Stdin = strings.NewReader(log)
	if out, err := base.CombinedOutput(); err != nil {
		t.Fatalf("baseline replay: %v\n%s", err, out)
	}
	baseline := time.Since(start)

	// The replay prints nothing before its log ends, so the signal goes
	// after a wait. A signal that comes before main asks for it (a busy
	// machine starts the process slower than the baseline's) kills the
	// process, exit -1 and no output: such a run goes again with twice
	// the wait. A ruled that never handles the signal fails every run.
	wait := baseline
	for run := 1; ; run++ {
		code, took, out := interruptReplay(t, bin, log, wait)
		if code == -1 && run < 5 {
			t.Logf("run %d: SIGTERM after %v killed the process before it handled signals; waiting %v", run, wait, 2*wait)
			wait *= 2
			continue
		}
		if code != 143 {
			t.Errorf("exit %d, want 143\n%s", code, out)
		}
		if bound := interruptGrace + 2*baseline; took > bound {
			t.Errorf("exited %v after SIGTERM, want within %v", took, bound)
		}
		if !strings.Contains(out, "interrupted by SIGTERM; stopped before the end, its output is incomplete") {
			t.Errorf("output does not say it was interrupted:\n%s", out)
		}
		return
	}
}

// interruptReplay starts ruled replay on a log of line and a standard
// input held open, sends SIGTERM after wait, and returns its exit code,
// how long it took to exit after the signal, and its output.
func interruptReplay(t *testing.T, bin, line string, wait time.Duration) (int, time.Duration, string) {
	t.Helper()
	cmd := exec.Command(bin, "replay", "--rules", "../../examples/rules", "--log", "-")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, line); err != nil {
		t.Fatal(err)
	}
	time.Sleep(wait) // it has loaded the rules and waits for more lines
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	kill := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() }) // it once waited for SIGKILL
	defer kill.Stop()
	_ = cmd.Wait()
	return cmd.ProcessState.ExitCode(), time.Since(sent), out.String()
}

// TestReplayReportsAnInterruption: a replay whose context a signal ends
// stops reading and reports, as for a log cut short, how many lines it
// replayed.
func TestReplayReportsAnInterruption(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(interruption{syscall.SIGINT})
	var out, errOut bytes.Buffer
	path := writeSteadyLog(t, false)
	code := replayMain(ctx, []string{"--rules", "../../examples/rules", "--log", path}, nil, &out, &errOut)
	want := fmt.Sprintf("ruled replay: %s: interrupted by SIGINT; only the 0 lines before it were replayed\n", path)
	if code != 1 || errOut.String() != want {
		t.Errorf("exit %d, %q, want 1 and %q", code, errOut.String(), want)
	}
}

// TestImportWritesNothingWhenInterrupted: ruled import envoy, interrupted
// before it writes, leaves no file behind.
func TestImportWritesNothingWhenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(interruption{syscall.SIGTERM})
	dir := t.TempDir()
	src := writeFile(t, dir, "envoy.yaml", "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"import", "envoy", src, "-o", out}, &stdout, &stderr); code == 0 ||
		!strings.Contains(stderr.String(), "interrupted by SIGTERM before any file was written") {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the output directory exists")
	}
}

// TestInterruptedToolsSayNothingFalse: interrupted before they print,
// check and eval print nothing, and ruled test's JSON says it was
// interrupted and is not ok.
func TestInterruptedToolsSayNothingFalse(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(interruption{syscall.SIGINT})
	for _, args := range [][]string{
		{"check", "../../examples/rules"},
		{"eval", "--rules", "../../examples/rules/cookbook", "--input", "testdata/eval/login.json"},
	} {
		var out, errOut bytes.Buffer
		if code := run(ctx, args, &out, &errOut); code == 0 || out.Len() > 0 {
			t.Errorf("%s: exit %d, printed %q", args[0], code, out.String())
		}
	}
	var out, errOut bytes.Buffer
	run(ctx, []string{"test", "--format", "json", "../../examples/rules"}, &out, &errOut)
	var rep testReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil || !rep.Interrupted || rep.OK || len(rep.Files) != 1 {
		t.Errorf("ruled test: %v, %+v", err, rep)
	}
}
