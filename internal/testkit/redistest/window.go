package redistest

import (
	"fmt"
	"time"
)

// WindowOffset is the fixedwindow offset (0 <= offset < window) for
// windows of window that makes the current window begin just now (a
// twentieth of a window ago, at most a second), so that the calls of a
// test made within almost a window's length fall in one window. A window
// starts at Redis time minus fmod(now - offset, window), and the Redis of
// these tests runs on this machine's clock.
func WindowOffset(window time.Duration) string {
	lead := min(time.Second, window/20)
	now, w := time.Now().UnixMilli(), window.Milliseconds()
	return fmt.Sprintf("%dms", ((now-lead.Milliseconds())%w+w)%w)
}
