package store

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"sync"
)

// tailLines is how many recent output lines a lineLogger keeps for errors.
const tailLines = 10

// lineLogger is the redis-server's stdout and stderr. It splits the output
// into lines of at most maxLogLine bytes and logs each, keeping the last few
// for error messages. os/exec calls Write from one goroutine at a time.
type lineLogger struct {
	log *slog.Logger

	mu        sync.Mutex
	buf       []byte
	truncated bool
	last      []string
}

func newLineLogger(log *slog.Logger) *lineLogger {
	return &lineLogger{log: log, buf: make([]byte, 0, 256)}
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := maxLogLine - len(w.buf); len(chunk) > room {
			w.buf = append(w.buf, chunk[:room]...)
			w.truncated = true
		} else {
			w.buf = append(w.buf, chunk...)
		}
		if i < 0 {
			break
		}
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

// flush logs a last line that had no newline.
func (w *lineLogger) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 || w.truncated {
		w.emit()
	}
}

// tail returns the last lines of output, joined with " | ".
func (w *lineLogger) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.last, " | ")
}

// redisLogRE matches redis-server's log format:
// "pid:role dd Mon yyyy hh:mm:ss.mmm <level> message", where level is '.'
// (debug), '-' (verbose), '*' (notice) or '#' (warning).
var redisLogRE = regexp.MustCompile(`^(\d+):([A-Z]) \d{1,2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3} ([.\-*#]) (.*)$`)

// redisSignalRE matches what redis-server logs from a signal handler, at
// its warning level: "pid:signal-handler (unix time) message".
var redisSignalRE = regexp.MustCompile(`^(\d+):signal-handler \(\d+\) (.*)$`)

// lifecycleLines are lines redis-server logs at its warning level that only
// tell its start and stop: the banner, the configuration it loaded, the
// shutdown ruled asked for. They are relayed at debug level. Every other
// warning is relayed as a warning, the memory overcommit advice included:
// the managed server does not fork to persist, but an operator may still
// want the kernel setting it names.
func lifecycleLine(msg string) bool {
	for _, p := range []string{
		"oO0OoO0OoO0Oo Redis is starting",
		"Redis version=",
		"Configuration loaded",
		"Server initialized",
		"User requested shutdown",
		"Received SIGTERM scheduling shutdown",
		"Received SIGINT scheduling shutdown",
		"Redis is now ready to exit",
	} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// redisLevel is the level ruled relays a line of redis-server at: debug for
// its chatter (debug, verbose and notice lines, and the start and stop
// lines of its warning level), warn for its warnings.
func redisLevel(mark string, msg string) slog.Level {
	if mark != "#" || lifecycleLine(msg) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}

// emit logs the buffered line; w.mu is held.
func (w *lineLogger) emit() {
	line := strings.TrimRight(string(w.buf), "\r")
	trunc := w.truncated
	w.buf, w.truncated = w.buf[:0], false
	if strings.TrimSpace(line) == "" {
		return
	}
	// Lines in neither format are unusual: start-up errors, crash reports.
	// (The ASCII-art logo is off: the server runs with always-show-logo no.)
	level, msg := slog.LevelWarn, line
	var attrs []slog.Attr
	if m := redisLogRE.FindStringSubmatch(line); m != nil {
		msg = m[4]
		attrs = append(attrs, slog.String("pid", m[1]))
		level = redisLevel(m[3], msg)
	} else if m := redisSignalRE.FindStringSubmatch(line); m != nil {
		msg = m[2]
		attrs = append(attrs, slog.String("pid", m[1]))
		level = redisLevel("#", msg)
	}
	if trunc {
		attrs = append(attrs, slog.Bool("truncated", true))
	}
	w.log.LogAttrs(context.Background(), level, msg, attrs...)
	if len(w.last) == tailLines {
		w.last = append(w.last[:0], w.last[1:]...)
	}
	w.last = append(w.last, msg)
}
