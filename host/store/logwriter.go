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
// "pid:role dd Mon yyyy hh:mm:ss.mmm <level> message".
var redisLogRE = regexp.MustCompile(`^(\d+):([A-Z]) \d{1,2} [A-Za-z]{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3} ([.\-*#]) (.*)$`)

// routineWarnings are lines redis-server logs at its warning level that say
// nothing worth a warning for a managed server: start and stop banners, and
// the memory overcommit and TCP backlog advice, which concern forking for
// persistence and TCP listeners, neither of which the managed server has.
var routineWarnings = []string{
	"oO0OoO0OoO0Oo Redis is starting",
	"Redis version=",
	"Configuration loaded",
	"Server initialized",
	"WARNING Memory overcommit must be enabled",
	"WARNING: The TCP backlog setting",
	"User requested shutdown",
	"Received SIGTERM scheduling shutdown",
	"Redis is now ready to exit",
}

func routine(msg string) bool {
	for _, p := range routineWarnings {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// emit logs the buffered line; w.mu is held.
func (w *lineLogger) emit() {
	line := strings.TrimRight(string(w.buf), "\r")
	trunc := w.truncated
	w.buf, w.truncated = w.buf[:0], false
	if strings.TrimSpace(line) == "" {
		return
	}
	level, msg := slog.LevelWarn, line // lines not in the log format are unusual: start-up errors, crashes
	var attrs []slog.Attr
	if m := redisLogRE.FindStringSubmatch(line); m != nil {
		msg = m[4]
		attrs = append(attrs, slog.String("pid", m[1]))
		switch {
		case m[3] != "#": // '*' notice, '-' verbose, '.' debug: routine chatter
			level = slog.LevelDebug
		case routine(msg):
			level = slog.LevelInfo
		}
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
