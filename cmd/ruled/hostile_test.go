package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// hostileMemoryMB is the most memory a command may take on a hostile
// file: a run that reaches it is killed (so that a regression fails the
// test instead of taking the machine), and the peak of one that does not
// must stay below it. ruled check of a small good file takes some 25 MB.
const hostileMemoryMB = 128

// boundedRun is what one run of the binary under a memory limit did.
type boundedRun struct {
	code           int
	stdout, stderr string
	took           time.Duration
	peakMB         int64
}

// runBounded runs the binary with args, killing it if its resident memory
// reaches hostileMemoryMB or it runs for a minute, and fails the test if
// either happens. Memory is sampled every 5 ms (a process's rusage would
// count the pages it shared with this test binary before exec): a
// regression, which expands for seconds, is caught; peakMB is the highest
// peak sampled, 0 for a run too short to be sampled.
func runBounded(t *testing.T, args ...string) boundedRun {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(buildRuled(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	killed := make(chan string, 1)
	var peak int64 // MB; read once the sampler is done
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			mb := residentMB(cmd.Process.Pid, "VmHWM") // the peak since exec
			peak = max(peak, mb)
			if mb >= hostileMemoryMB {
				_ = cmd.Process.Kill()
				killed <- fmt.Sprintf("killed at %d MB resident", mb)
				return
			}
			if time.Since(start) > time.Minute {
				_ = cmd.Process.Kill()
				killed <- "killed after a minute"
				return
			}
		}
	}()
	_ = cmd.Wait()
	close(done)
	<-sampled
	r := boundedRun{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String(), took: time.Since(start), peakMB: peak}
	select {
	case why := <-killed:
		t.Fatalf("ruled %s: %s\n%s", strings.Join(args, " "), why, tail(r.stderr+r.stdout, 10))
	default:
	}
	return r
}

// residentMB is the resident memory of process pid in MB, 0 once it is
// gone: now (field VmRSS) or at its peak (VmHWM).
func residentMB(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb >> 10
		}
	}
	return 0
}

// aliasBomb returns YAML lines defining anchors prefix0 to prefixN, each a
// list of two aliases of the one before: *prefixN expands to 2^N leaves.
func aliasBomb(prefix string, levels int, indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s- &%s0 [a, b]\n", indent, prefix)
	for i := 1; i <= levels; i++ {
		fmt.Fprintf(&b, "%s- &%s%d [*%s%d, *%s%d]\n", indent, prefix, i, prefix, i-1, prefix, i-1)
	}
	return b.String()
}

// bombRules is a 0.6 KB rule file whose one rule's config holds an alias
// that expands to 2^23 nodes, and goodRules the same file with the alias
// written out small: ruled check's baseline in the same run.
func bombRules(alias string) string {
	return "x-bomb:\n" + aliasBomb("l", 23, "  ") + `rules:
  - name: r
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 10, window: 1s, x-note: ` + alias + `}
`
}

// TestHostileRuleFileIsRefusedCheaply: ruled check refuses a rule file
// whose aliases nest (each level doubling the last) at the alias, in a
// few megabytes and in about the time it takes to check a good file,
// where it once took 27 s and 3.5 GB.
func TestHostileRuleFileIsRefusedCheaply(t *testing.T) {
	dir := t.TempDir()
	good := runBounded(t, "check", writeFile(t, dir, "good.yaml", bombRules("[x]")))
	bomb := writeFile(t, dir, "bomb.yaml", bombRules("*l23"))
	got := runBounded(t, "check", bomb)
	if got.code != 1 || !strings.Contains(got.stdout+got.stderr, "bomb.yaml:") ||
		!strings.Contains(got.stdout+got.stderr, "past 100000 nodes when expanded") {
		t.Fatalf("exit %d, want 1 with the alias's position:\n%s%s", got.code, got.stdout, got.stderr)
	}
	// The refusal is in the time of a good file's check: a regression
	// expands 2^23 nodes, which takes seconds.
	if got.took > 10*good.took+time.Second {
		t.Errorf("refused in %v; a good file is checked in %v", got.took, good.took)
	}
	t.Logf("bomb: %v, %d MB peak; good file: %v, %d MB", got.took, got.peakMB, good.took, good.peakMB)
}

// TestHostileEnvoyConfigIsRefusedCheaply: ruled import envoy refuses an
// envoy config whose descriptors nest aliases, where a 2.9 KB one once
// took 6.2 GB and died of out-of-memory.
func TestHostileEnvoyConfigIsRefusedCheaply(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("domain: bomb\ndescriptors:\n  - &d0 {key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1}}\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&b, "  - &d%d {key: k%d, descriptors: [*d%d, *d%d]}\n", i, i, i-1, i-1)
	}
	src := writeFile(t, dir, "bomb.yaml", b.String())
	out := filepath.Join(dir, "out")
	got := runBounded(t, "import", "envoy", src, "-o", out)
	if got.code != 1 || !strings.Contains(got.stdout+got.stderr, "past 100000 nodes when expanded") {
		t.Fatalf("exit %d, want 1 saying the aliases expand too far:\n%s%s", got.code, got.stdout, got.stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("the output directory was created for a refused config")
	}
}

// TestHostileRuleTestFileIsRefusedCheaply: ruled test refuses a test file
// whose steps merge keys that nest (2^30 merges), and one whose cases share steps through an
// alias to ask for more checks than MaxChecks (300 cases of 10 steps each
// repeated 1,000,000 times: 3×10⁹ checks, which once ran for hours).
func TestHostileRuleTestFileIsRefusedCheaply(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "rules.yaml", "rules:\n  - {name: r, subject: request.ip, plugin: fixedwindow, config: {limit: 5, window: 10s}}\n")
	var nested strings.Builder // merge keys that nest: each level merges the one below twice
	nested.WriteString("x-bomb:\n  - &m0 {hits: 1}\n")
	for i := 1; i <= 30; i++ {
		fmt.Fprintf(&nested, "  - &m%d {<<: [*m%d, *m%d]}\n", i, i-1, i-1)
	}
	nested.WriteString("tests:\n  - {name: c, steps: [{<<: *m30, request: {ip: 192.0.2.1}}]}\n")
	var shared strings.Builder
	shared.WriteString("x-steps: &steps\n")
	for i := range 10 {
		fmt.Fprintf(&shared, "  - {request: {ip: 192.0.2.%d}, repeat: 1000000}\n", i)
	}
	shared.WriteString("tests:\n")
	for i := range 300 {
		fmt.Fprintf(&shared, "  - {name: c%d, steps: *steps}\n", i)
	}
	for name, tc := range map[string]struct{ text, want string }{
		"nested_test.yaml": {nested.String(), "past 100000 nodes when expanded"},
		"shared_test.yaml": {shared.String(), `shared_test.yaml:13:5: case "c0", step 2: the file's cases send more than 1000000 checks`},
	} {
		got := runBounded(t, "test", writeFile(t, dir, name, tc.text))
		if got.code != 1 || !strings.Contains(got.stdout, tc.want) {
			t.Errorf("%s: exit %d, want 1 and %q:\n%s%s", name, got.code, tc.want, got.stdout, got.stderr)
		}
	}
}

// TestServedRuleFileOverwrittenByABomb: a bomb written over a served rule
// file is refused by the watcher's reload with the alias's position; the
// old rules keep deciding and the daemon's memory stays bounded.
func TestServedRuleFileOverwrittenByABomb(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "rules.yaml", faultRules())
	d := spawnDaemonAt(t, path)
	d.waitReady(15 * time.Second)
	if err := os.WriteFile(path, []byte(bombRules("*l23")), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(d.log.String(), "past 100000 nodes when expanded") {
		if time.Now().After(deadline) {
			t.Fatalf("no reload refusal in the log:\n%s", tail(d.log.String(), 20))
		}
		if mb := residentMB(d.cmd.Process.Pid, "VmRSS"); mb > hostileMemoryMB {
			t.Fatalf("ruled serve took %d MB reading the bomb", mb)
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.checkLimits("203.0.113.50") // the rules served before the bomb
	if mb := residentMB(d.cmd.Process.Pid, "VmHWM"); mb > hostileMemoryMB {
		t.Errorf("ruled serve peaked at %d MB", mb)
	}
}

// malformedPluginRules is faultRules with a rule on /bad decided by the
// module on which wazero v1.12.0 panics (host/wasm's testdata), pinned by
// its digest.
func malformedPluginRules(t *testing.T, dir string) string {
	t.Helper()
	bin, err := os.ReadFile("../../host/wasm/testdata/wazero-panics.wasm")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "malformed.wasm", string(bin))
	return fmt.Sprintf(`plugins:
  malformed: {wasm: ./malformed.wasm, sha256: "%x"}
`, sha256.Sum256(bin)) + faultRules() + `  - name: bad
    when: request.path == "/bad"
    subject: request.ip
    plugin: malformed
`
}

// TestMalformedPluginIsRefused: a Wasm module that once panicked wazero's
// validator is refused with its error by ruled check and, written over a
// served rule file, by the reload, while the old rules keep deciding.
func TestMalformedPluginIsRefused(t *testing.T) {
	dir := t.TempDir()
	const want = "type index 48 out of range"
	bad := writeFile(t, dir, "bad.yaml", malformedPluginRules(t, dir))
	if got := runBounded(t, "check", bad); got.code != 1 || !strings.Contains(got.stdout+got.stderr, want) {
		t.Fatalf("ruled check: exit %d, want 1 mentioning %q:\n%s%s", got.code, want, got.stdout, got.stderr)
	}
	path := writeFile(t, dir, "rules.yaml", faultRules())
	d := spawnDaemonAt(t, path)
	d.waitReady(15 * time.Second)
	if err := os.WriteFile(path, []byte(malformedPluginRules(t, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(d.log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload refusal in the log:\n%s", tail(d.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.checkLimits("203.0.113.51") // the rules served before
}
