package wasm

import (
	"bytes"
	"context"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/ruled-dev/ruled/internal/lograte"
	"github.com/ruled-dev/ruled/sdk"
)

// Bounds on what a guest can make ruled log: lines are cut at maxLogLine
// bytes, and each plugin gets at most logLinesPerSecond lines a second
// (its log import and its stdout and stderr together); the rest are dropped
// and counted.
const (
	maxLogLine        = 1024
	logLinesPerSecond = 100
)

// guestLog writes one line from the guest, through the capability's Host
// during a decision (which attributes it to the rule's plugin) or the
// plugin's logger otherwise.
func (p *Plugin) guestLog(ctx context.Context, h sdk.Host, level sdk.Level, msg string) {
	ok, dropped := p.logs.Allow("", time.Now())
	if dropped > 0 {
		p.log.Warn("dropped guest log lines over the rate limit", "count", dropped, "limit_per_second", logLinesPerSecond)
	}
	if !ok {
		return
	}
	if h != nil {
		h.Log(level, msg)
		return
	}
	p.log.Log(ctx, slog.Level(level), msg)
}

// newLogGate bounds the lines a plugin logs: logLinesPerSecond a second.
func newLogGate() *lograte.Gate { return lograte.NewGateN(time.Second, logLinesPerSecond) }

// lineWriter turns a guest's stdout or stderr into log lines. It belongs
// to one instance and, like it, is used by one goroutine at a time.
type lineWriter struct {
	in        *instance
	stream    string
	buf       []byte
	truncated bool
}

// Write implements io.Writer; it never fails.
func (w *lineWriter) Write(b []byte) (int, error) {
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			w.add(b)
			break
		}
		w.add(b[:i])
		w.flush()
		b = b[i+1:]
	}
	return n, nil
}

func (w *lineWriter) add(b []byte) {
	room := maxLogLine - len(w.buf)
	if len(b) > room {
		b, w.truncated = b[:max(room, 0)], true
	}
	w.buf = append(w.buf, b...)
}

// flush logs the pending line, if any.
func (w *lineWriter) flush() {
	if len(w.buf) == 0 && !w.truncated {
		return
	}
	line := truncate(w.buf, maxLogLine)
	if w.truncated {
		line += "…"
	}
	w.buf, w.truncated = w.buf[:0], false
	level := sdk.LevelInfo
	if w.stream == "stderr" {
		level = sdk.LevelWarn
		w.in.noteDetail(line)
	}
	w.in.p.guestLog(context.Background(), nil, level, w.stream+": "+line)
}

// truncate returns b as a string of at most n bytes, cut at a rune boundary.
func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n])
}
