package process

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestLogsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1_790_000_000, 0)
	sink := &logSink{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		now: func() time.Time { return clock }}
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
