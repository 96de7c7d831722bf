package process

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"

	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/sdk"
)

// Bounds on what a plugin can make ruled log: lines are cut at maxLogLine
// bytes and attribute values at maxLogValue, at most maxLogArgs attributes
// are kept, and each plugin gets at most logLinesPerSecond lines a second
// (go-plugin's own lines, the process's stderr and stdout and its Log calls
// together); the rest are dropped and counted.
const (
	maxLogLine        = 1024
	maxLogValue       = 256
	maxLogArgs        = 16
	logLinesPerSecond = 100
)

// logSink is a plugin's bounded way into the daemon's log. The zero value
// is not ready: use newLogSink.
type logSink struct {
	now  func() time.Time // time.Now unless a test sets it
	gate *lograte.Gate    // logLinesPerSecond a second

	mu  sync.Mutex
	log *slog.Logger
}

// newLogSink returns a sink that logs through l.
func newLogSink(l *slog.Logger) *logSink {
	return &logSink{log: l, gate: lograte.NewGateN(time.Second, logLinesPerSecond)}
}

func (s *logSink) logger() *slog.Logger {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log
}

func (s *logSink) setLogger(l *slog.Logger) {
	s.mu.Lock()
	s.log = l
	s.mu.Unlock()
}

// emit logs one line through h when it is set (the capability's Host of a
// decision, which attributes the line to the rule's plugin), or through the
// plugin's logger.
func (s *logSink) emit(h sdk.Host, level slog.Level, msg string, args ...any) {
	l := s.logger()
	if h == nil && !l.Enabled(context.Background(), level) {
		return
	}
	now := time.Now
	if s.now != nil {
		now = s.now
	}
	ok, dropped := s.gate.Allow("", now())
	if dropped > 0 {
		l.Warn("dropped plugin log lines over the rate limit", "count", dropped, "limit_per_second", logLinesPerSecond)
	}
	if !ok {
		return
	}
	msg = truncate(msg, maxLogLine)
	if h != nil {
		h.Log(sdk.Level(level), msg)
		return
	}
	l.Log(context.Background(), level, msg, boundArgs(args)...)
}

// boundArgs keeps at most maxLogArgs key-value pairs, with short values and
// unique keys: a key the plugin repeats, or one the line has already (the
// handler's time, level, msg and source; the plugin's logger's process,
// until the plugin has said its name, then plugin), gets a numeric suffix
// ("msg_2"), so that a JSON log line never has a key twice.
func boundArgs(args []any) []any {
	if len(args) > 2*maxLogArgs {
		args = args[:2*maxLogArgs]
	}
	out := make([]any, 0, len(args))
	seen := map[string]bool{slog.TimeKey: true, slog.LevelKey: true, slog.MessageKey: true, slog.SourceKey: true, "process": true, "plugin": true}
	for i := 0; i+1 < len(args); i += 2 {
		k := uniqueKey(truncate(fmt.Sprint(args[i]), 64), seen)
		var v any
		switch t := args[i+1].(type) {
		case int, int64, int32, uint64, bool, float64, time.Duration:
			v = t
		case error:
			v = truncate(t.Error(), maxLogValue)
		default:
			v = truncate(fmt.Sprint(t), maxLogValue)
		}
		out = append(out, k, v)
	}
	return out
}

// uniqueKey returns k, or k with the first numeric suffix that makes it a
// key not in seen, and records it in seen.
func uniqueKey(k string, seen map[string]bool) string {
	u := k
	for n := 2; seen[u]; n++ {
		u = k + "_" + strconv.Itoa(n)
	}
	seen[u] = true
	return u
}

// truncate returns s cut to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// slogLevel maps an hclog level to slog's.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// hcLogger adapts the daemon's slog logger to the hclog.Logger go-plugin
// logs through, including the lines it reads from the plugin's stderr.
// Everything goes through the plugin's logSink, so it is bounded.
type hcLogger struct {
	sink *logSink
	name string
	args []any
}

var _ hclog.Logger = (*hcLogger)(nil)

// rootLogger names go-plugin's own log lines; the lines it relays from the
// plugin's stderr come through a logger named below it.
const rootLogger = "go-plugin"

func newHCLogger(sink *logSink) *hcLogger { return &hcLogger{sink: sink, name: rootLogger} }

// Log implements hclog.Logger.
func (l *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off || level == hclog.NoLevel && msg == "" {
		return
	}
	if level == hclog.Info && l.name == rootLogger {
		level = hclog.Debug // go-plugin's own chatter ("plugin process exited" on every Close)
	}
	all := make([]any, 0, 2+len(l.args)+len(args))
	all = append(all, "component", l.name)
	all = append(all, l.args...)
	all = append(all, args...)
	for i := 0; i < len(all); i += 2 {
		if all[i] == "plugin" { // go-plugin's name for the executable; "plugin" is the plugin's name in ruled's log
			all[i] = "executable"
		}
	}
	l.sink.emit(nil, slogLevel(level), msg, all...)
}

// Trace implements hclog.Logger.
func (l *hcLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }

// Debug implements hclog.Logger.
func (l *hcLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }

// Info implements hclog.Logger.
func (l *hcLogger) Info(msg string, args ...any) { l.Log(hclog.Info, msg, args...) }

// Warn implements hclog.Logger.
func (l *hcLogger) Warn(msg string, args ...any) { l.Log(hclog.Warn, msg, args...) }

// Error implements hclog.Logger.
func (l *hcLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hcLogger) enabled(level hclog.Level) bool {
	return l.sink.logger().Enabled(context.Background(), slogLevel(level))
}

// IsTrace implements hclog.Logger.
func (l *hcLogger) IsTrace() bool { return l.enabled(hclog.Trace) }

// IsDebug implements hclog.Logger.
func (l *hcLogger) IsDebug() bool { return l.enabled(hclog.Debug) }

// IsInfo implements hclog.Logger.
func (l *hcLogger) IsInfo() bool { return l.enabled(hclog.Info) }

// IsWarn implements hclog.Logger.
func (l *hcLogger) IsWarn() bool { return l.enabled(hclog.Warn) }

// IsError implements hclog.Logger.
func (l *hcLogger) IsError() bool { return l.enabled(hclog.Error) }

// ImpliedArgs implements hclog.Logger.
func (l *hcLogger) ImpliedArgs() []any { return l.args }

// With implements hclog.Logger.
func (l *hcLogger) With(args ...any) hclog.Logger {
	return &hcLogger{sink: l.sink, name: l.name, args: append(append([]any(nil), l.args...), args...)}
}

// Name implements hclog.Logger.
func (l *hcLogger) Name() string { return l.name }

// Named implements hclog.Logger.
func (l *hcLogger) Named(name string) hclog.Logger {
	return &hcLogger{sink: l.sink, name: l.name + "." + name, args: l.args}
}

// ResetNamed implements hclog.Logger.
func (l *hcLogger) ResetNamed(name string) hclog.Logger {
	return &hcLogger{sink: l.sink, name: name, args: l.args}
}

// SetLevel implements hclog.Logger; the daemon's logger decides levels.
func (l *hcLogger) SetLevel(hclog.Level) {}

// GetLevel implements hclog.Logger: the lowest level the daemon's logger
// writes.
func (l *hcLogger) GetLevel() hclog.Level {
	for _, lv := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn, hclog.Error} {
		if l.enabled(lv) {
			return lv
		}
	}
	return hclog.Off
}

// StandardLogger implements hclog.Logger.
func (l *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter implements hclog.Logger: every line is logged at info.
func (l *hcLogger) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return &lineWriter{emit: func(line string) { l.Info(line) }}
}

// lineWriter turns a byte stream (the plugin's stdout or stderr as go-plugin
// relays them) into log lines of at most maxLogLine bytes.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(line string)
}

// Write implements io.Writer; it never fails.
func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			room := maxLogLine - len(w.buf)
			w.buf = append(w.buf, b[:min(len(b), max(room, 0))]...)
			break
		}
		room := maxLogLine - len(w.buf)
		w.buf = append(w.buf, b[:min(i, max(room, 0))]...)
		if line := strings.TrimRight(string(w.buf), "\r"); line != "" {
			w.emit(line)
		}
		w.buf = w.buf[:0]
		b = b[i+1:]
	}
	return n, nil
}
