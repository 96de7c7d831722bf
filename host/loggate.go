package host

import (
	"context"
	"log/slog"
	"time"
)

// gatedLogEvery is the least time between two warnings of one kind for one
// rule that requests can set off ("decision degraded", "refund failed"):
// during an outage every decision degrades, and one line per rule every
// 10 s says so without flooding the log.
const gatedLogEvery = 10 * time.Second

// warnGated logs msg for rule at WARN, at most once every gatedLogEvery
// for that message and rule, with the count of the lines held back since
// the last one ("suppressed").
func (e *Engine) warnGated(msg, rule string, args ...any) {
	ok, n := e.warnLog.Allow(msg+"\x00"+rule, time.Now())
	if !ok {
		return
	}
	e.log.Log(context.Background(), slog.LevelWarn, msg, append([]any{"rule", rule, "suppressed", n}, args...)...)
}
