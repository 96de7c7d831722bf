package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// reloadDebounce is how long the watcher waits after the last change before
// it reloads, so that an editor's or Kubernetes' multi-step replace of a
// file is reloaded once, complete.
const reloadDebounce = 250 * time.Millisecond

// WatchRules reloads the engine's rules whenever something changes in the
// directory that holds them (the directory itself when the rules are a
// directory). Watching the directory rather than the file catches atomic
// replaces (write-then-rename) and Kubernetes' symlink swaps. A bad new set
// is logged and the old one keeps serving. WatchRules returns when ctx ends.
func (e *Engine) WatchRules(ctx context.Context, path string, onReload func(n int, err error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("host: watching rules: %w", err)
	}
	defer w.Close()
	dir := path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		dir = filepath.Dir(path)
	}
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("host: watching %s: %w", dir, err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Has(fsnotify.Chmod) && !ev.Has(fsnotify.Write) {
				continue
			}
			timer.Reset(reloadDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			e.log.Warn("rule watcher", "err", err)
		case <-timer.C:
			n, err := e.Reload()
			e.logReload("file change", n, err)
			if onReload != nil {
				onReload(n, err)
			}
		}
	}
}

// logReload writes the one log line a reload gets.
func (e *Engine) logReload(trigger string, n int, err error) {
	if err != nil {
		e.log.Error("rules reload failed; the previous rules keep serving", "trigger", trigger, "err", err)
		return
	}
	e.log.Info("rules reloaded", "trigger", trigger, "rules", n)
}

// ReloadFrom reloads the rules and logs the outcome, naming what triggered it
// (a signal, the admin API).
func (e *Engine) ReloadFrom(trigger string) (int, error) {
	n, err := e.Reload()
	e.logReload(trigger, n, err)
	return n, err
}
