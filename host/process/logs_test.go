package process

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestLogsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1_790_000_000, 0)
	sink := newLogSink(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	sink.now = func() time.Time { return clock }
	l := newHCLogger(sink).Named("faulty")
	for range 150 {
		l.Warn(strings.Repeat("x", 5000), "plugin", "/bin/faulty", "v", strings.Repeat("y", 1000))
	}
	if n := strings.Count(buf.String(), "\n"); n != logLinesPerSecond {
		t.Fatalf("%d lines logged in one second, want %d", n, logLinesPerSecond)
	}
	first, _, _ := strings.Cut(buf.String(), "\n")
	if len(first) > maxLogLine+maxLogValue+200 || !strings.Contains(first, "executable=/bin/faulty") ||
		!strings.Contains(first, "component=go-plugin.faulty") {
		t.Fatalf("line of %d bytes: %.300s", len(first), first)
	}
	// The next second reports what was dropped.
	clock = clock.Add(time.Second)
	buf.Reset()
	l.Error("again")
	if !strings.Contains(buf.String(), "dropped plugin log lines over the rate limit") || !strings.Contains(buf.String(), "count=50") {
		t.Fatalf("log:\n%s", buf.String())
	}
	// go-plugin's own info lines are debug lines for ruled.
	buf.Reset()
	newHCLogger(sink).Info("plugin process exited")
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Fatalf("log:\n%s", buf.String())
	}
	if newHCLogger(sink).GetLevel() != hclog.Debug {
		t.Fatal("GetLevel does not follow the handler's level")
	}
}

func TestLineWriter(t *testing.T) {
	var lines []string
	w := &lineWriter{emit: func(l string) { lines = append(lines, l) }}
	_, _ = w.Write([]byte("one\ntw"))
	_, _ = w.Write([]byte("o\r\n\n" + strings.Repeat("z", 3000) + "\n"))
	if len(lines) != 3 || lines[0] != "one" || lines[1] != "two" || len(lines[2]) != maxLogLine {
		t.Fatalf("lines %q", lines)
	}
}

func TestBackoff(t *testing.T) {
	got := []time.Duration{}
	for n := range 10 {
		got = append(got, backoff(100*time.Millisecond, 10*time.Second, n))
	}
	want := []time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("backoff %v", got)
		}
	}
}

// TestPluginLogKeysAreUnique relays a line whose attributes repeat each
// other and the handler's own keys: every key of the JSON line is unique,
// and the repeated values are kept under suffixed keys.
func TestPluginLogKeysAreUnique(t *testing.T) {
	var buf bytes.Buffer
	sink := newLogSink(slog.New(slog.NewJSONHandler(&buf, nil)).With("plugin", "conc"))
	newHCLogger(sink).Named("conc").Warn("hello", "msg", "m", "level", "l", "time", "t", "component", "c",
		"plugin", "/bin/conc", "executable", "e", "k", 1, "k", 2, "process", "p")
	line := strings.TrimSpace(buf.String())
	keys, err := jsonKeys(line)
	if err != nil {
		t.Fatalf("%v: %s", err, line)
	}
	seen := map[string]bool{}
	for _, k := range keys {
		if seen[k] {
			t.Errorf("key %q twice in %s", k, line)
		}
		seen[k] = true
	}
	for _, want := range []string{`"msg":"hello"`, `"plugin":"conc"`, `"component":"go-plugin.conc"`, `"msg_2":"m"`, `"level_2":"l"`,
		`"time_2":"t"`, `"component_2":"c"`, `"executable":"/bin/conc"`, `"executable_2":"e"`, `"k":1`, `"k_2":2`, `"process_2":"p"`} {
		if !strings.Contains(line, want) {
			t.Errorf("line lacks %s: %s", want, line)
		}
	}
}

// jsonKeys returns the keys of the JSON object s in order, duplicates
// included (encoding/json's Unmarshal would keep only the last).
func jsonKeys(s string) ([]string, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("not an object: %v %v", tok, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, tok.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
	}
	return keys, nil
}
