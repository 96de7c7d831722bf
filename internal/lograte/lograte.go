// Package lograte keeps log lines that an outside party can trigger (a
// failed TLS handshake, a decision degraded by an outage, a plugin that
// logs in a loop) from flooding the log: one line (or a set number of
// lines) per kind of event every interval, the first of the next interval
// saying how many were dropped in between.
package lograte

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxKeys bounds the kinds of lines a Gate tells apart; lines of further
// kinds share one slot, so that keys chosen by a client cannot grow it.
const maxKeys = 4096

// overflowKey is the slot of the kinds past maxKeys.
const overflowKey = "\x00other"

// Gate lets a number of lines per key through every interval (one, for
// NewGate) and counts the ones it holds back. An interval begins with the
// first line of a key after the previous one ended. The zero value is not
// ready: use NewGate or NewGateN. It is lock-free once a key has its slot.
type Gate struct {
	every time.Duration
	lines int64    // lines per key per interval
	keys  sync.Map // key -> *slot
	n     atomic.Int32
}

type slot struct {
	cur        atomic.Pointer[interval] // nil before the key's first line
	suppressed atomic.Int64             // lines held back since the last interval began
}

// interval is one interval of one key.
type interval struct {
	end  int64        // unix nanoseconds at which it ends
	used atomic.Int64 // lines let through in it, and those that found it full
}

// NewGate returns a Gate that lets one line per key through every every.
func NewGate(every time.Duration) *Gate { return NewGateN(every, 1) }

// NewGateN returns a Gate that lets n lines per key through every every
// (at least one): a budget of lines per interval, such as a plugin's
// lines per second.
func NewGateN(every time.Duration, n int) *Gate {
	return &Gate{every: every, lines: int64(max(n, 1))}
}

// Allow reports whether a line for key may be written at now, and if it is
// the first line of an interval, how many lines were held back since the
// previous interval began; the other lines let through report 0.
func (g *Gate) Allow(key string, now time.Time) (ok bool, suppressed int64) {
	s := g.slot(key)
	t := now.UnixNano()
	cur := s.cur.Load()
	if cur == nil || t >= cur.end {
		next := &interval{end: t + int64(g.every)}
		next.used.Store(1)
		if s.cur.CompareAndSwap(cur, next) {
			return true, s.suppressed.Swap(0)
		}
		cur = s.cur.Load() // another line began the interval first
	}
	// Once the interval's lines are spent (an outage: every degraded
	// decision asks), one atomic write per held-back line.
	if cur.used.Load() < g.lines && cur.used.Add(1) <= g.lines {
		return true, 0
	}
	s.suppressed.Add(1)
	return false, 0
}

func (g *Gate) slot(key string) *slot {
	if v, ok := g.keys.Load(key); ok {
		return v.(*slot)
	}
	if g.n.Add(1) > maxKeys {
		g.n.Add(-1)
		key = overflowKey
	}
	v, loaded := g.keys.LoadOrStore(key, &slot{})
	if loaded && key != overflowKey {
		g.n.Add(-1)
	}
	return v.(*slot)
}

// Handler is a slog.Handler that passes at most one record per kind every
// interval to the handler it wraps, adding to it the attribute dropped:
// how many records of that kind it dropped since the last one it passed.
// A record's kind is its level and its message up to the first " from "
// or " serving " (where net/http names the peer), so that lines which
// differ only in the client's address are one kind.
type Handler struct {
	next slog.Handler
	gate *Gate
}

// NewHandler wraps next, passing one record per kind every every.
func NewHandler(next slog.Handler, every time.Duration) *Handler {
	return &Handler{next: next, gate: NewGate(every)}
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	ok, dropped := h.gate.Allow(r.Level.String()+" "+Kind(r.Message), r.Time)
	if !ok {
		return nil
	}
	r = r.Clone()
	r.AddAttrs(slog.Int64("dropped", dropped))
	return h.next.Handle(ctx, r)
}

// WithAttrs implements slog.Handler; the result shares h's counts.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(as), gate: h.gate}
}

// WithGroup implements slog.Handler; the result shares h's counts.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), gate: h.gate}
}

// Kind is msg up to the first " from " or " serving ", where net/http
// puts the peer's address.
func Kind(msg string) string {
	for _, sep := range []string{" from ", " serving "} {
		if i := strings.Index(msg, sep); i >= 0 {
			msg = msg[:i]
		}
	}
	return msg
}
