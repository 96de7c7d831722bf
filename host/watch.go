package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/rules"
)

// reloadDebounce is how long the watcher waits after the last event before
// it looks at the files, so that an editor's or Kubernetes' multi-step
// replace of a file is seen once, complete.
const reloadDebounce = 250 * time.Millisecond

// reloadMaxDelay bounds how long a stream of events (a log file written
// next to the rules, say) can put off looking at the files.
const reloadMaxDelay = time.Second

// maxRuleFile is the most the watcher hashes of a rule file; a larger one
// is seen as unreadable (and fails to load anyway: it is no rule file).
const maxRuleFile = 64 << 20

// WatchRules reloads the engine's rules when the content of a file they
// come from changes: the rule file at path or, when path is a directory,
// its rule files as rules.Parse reads them (*.yaml and *.yml), and the
// plugin files (wasm, process) that those files declare, wherever they
// are. It watches the directories that hold these files rather than the
// files, so that atomic replaces (write-then-rename) and Kubernetes'
// symlink swaps are seen. Once events settle (reloadDebounce after the
// last, reloadMaxDelay at most after the first) it compares each file's
// SHA-256 with the one it saw last, and reloads only when one differs or a
// file appeared or went away: a touch, a rewrite with the same content, or
// any other file in those directories (a log written next to the rules)
// never reloads. The files and directories watched follow the rule files'
// declarations. A bad new set is logged and the old one keeps serving.
// SIGHUP and the admin API reload unconditionally (Engine.Reload). WatchRules
// returns when ctx ends. ruled serve runs it unless --watch=false.
func WatchRules(ctx context.Context, e *Engine, path string, onReload func(n int, err error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("host: watching rules: %w", err)
	}
	defer w.Close()
	rw := &ruleWatch{path: path, w: w, log: e.log, failed: map[string]bool{}}
	rw.rulesDir = path
	if fi, err := os.Stat(path); err == nil && !fi.IsDir() {
		rw.rulesDir = filepath.Dir(path)
	}
	if err := w.Add(rw.rulesDir); err != nil {
		return fmt.Errorf("host: watching %s: %w", rw.rulesDir, err)
	}
	rw.scan(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var first time.Time // of the events not looked into yet
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
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			timer.Reset(max(min(reloadDebounce, reloadMaxDelay-now.Sub(first)), 0))
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			e.log.Warn("rule watcher", "err", err)
		case <-timer.C:
			first = time.Time{}
			if !rw.scan(ctx) {
				e.log.Debug("rule and plugin files unchanged; not reloading")
				continue
			}
			n, err := e.Reload(ctx, "file change")
			if onReload != nil {
				onReload(n, err)
			}
		}
	}
}

// ruleWatch is WatchRules' view of the files it follows.
type ruleWatch struct {
	path     string
	rulesDir string
	w        *fsnotify.Watcher
	log      *slog.Logger
	failed   map[string]bool // could not be watched (warned once)

	files     map[string]fileState // as last seen, rule and plugin files
	ruleFiles []string
	plugins   []pluginRef // the plugin files the rule files declare
}

// fileState is what the watcher knows of one file's content.
type fileState struct {
	digest string      // hex SHA-256, or "error: ..." when it cannot be read
	info   os.FileInfo // the file as hashed, or nil
}

type pluginRef struct {
	path    string
	maxSize int64
}

// scan looks at every file followed, reports whether any changed since
// the last scan (appeared, went away, or has another digest), and brings
// the watched directories in line with the plugin files declared.
func (rw *ruleWatch) scan(ctx context.Context) bool {
	next := map[string]fileState{}
	ruleFiles, err := rules.Sources(rw.path)
	if err != nil {
		next[rw.path] = fileState{digest: "error: " + err.Error()}
	}
	rulesSame := rw.files != nil && slices.Equal(ruleFiles, rw.ruleFiles)
	readable := true
	for _, f := range ruleFiles {
		next[f] = rw.state(f, maxRuleFile)
		rulesSame = rulesSame && next[f].digest == rw.files[f].digest
		readable = readable && !strings.HasPrefix(next[f].digest, "error: ")
	}
	// The declarations may have changed. A rule file that cannot be read
	// (pluginfile.Digest refuses what is not a regular file: a FIFO would
	// block) fails the reload anyway: keep following the plugin files
	// declared before.
	if !rulesSame && readable {
		rw.plugins = rw.plugins[:0]
		if files, _ := readRules(ctx, FileRules(rw.path)); files != nil {
			for _, d := range files.Plugins() {
				p, maxSize := PluginFile(d)
				rw.plugins = append(rw.plugins, pluginRef{p, maxSize})
			}
		}
	}
	want := map[string]bool{rw.rulesDir: true}
	for _, p := range rw.plugins {
		next[p.path] = rw.state(p.path, p.maxSize)
		want[filepath.Dir(p.path)] = true
	}
	rw.watchDirs(want)
	changed := !maps.EqualFunc(rw.files, next, func(a, b fileState) bool { return a.digest == b.digest })
	rw.files, rw.ruleFiles = next, ruleFiles
	return changed
}

// state returns the file's digest: the last one when the file is the same
// (same inode, size and modification time) as when it was last hashed.
func (rw *ruleWatch) state(path string, maxSize int64) fileState {
	before, err := os.Stat(path)
	if err != nil {
		return fileState{digest: "error: " + err.Error()}
	}
	if old, ok := rw.files[path]; ok && sameFile(old.info, before) {
		return old
	}
	d, err := pluginfile.Digest(path, maxSize)
	if err != nil {
		return fileState{digest: "error: " + err.Error()}
	}
	st := fileState{digest: d}
	if after, err := os.Stat(path); err == nil && sameFile(before, after) {
		st.info = after // not written to while hashed: the stat stands for the digest
	}
	return st
}

func sameFile(a, b os.FileInfo) bool {
	return a != nil && b != nil && os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// watchDirs watches the directories of want and stops watching the others.
// A plugin's directory that cannot be watched is warned about once: its
// changes are then seen with the next change of a rule file, a SIGHUP or
// an admin reload.
func (rw *ruleWatch) watchDirs(want map[string]bool) {
	watched := map[string]bool{} // fsnotify forgets a directory that was removed
	for _, d := range rw.w.WatchList() {
		watched[d] = true
		if !want[d] && d != rw.rulesDir {
			_ = rw.w.Remove(d)
		}
	}
	for d := range want {
		if watched[d] {
			continue
		}
		if err := rw.w.Add(d); err != nil {
			if !rw.failed[d] {
				rw.log.Warn("plugin directory not watched; reload with SIGHUP or the admin API after changing its plugins", "dir", d, "err", err)
				rw.failed[d] = true
			}
			continue
		}
		delete(rw.failed, d)
	}
}

// LogRuleErrors logs err, a load error, at error level: one line with msg
// per error of a rules.ErrorList, with attrs and then the error's file,
// line, col and rule when known, its code, and its message as err; any
// other error as one line. It returns how many lines it logged.
func LogRuleErrors(log *slog.Logger, msg string, err error, attrs ...any) int {
	var list rules.ErrorList
	if !errors.As(err, &list) {
		log.Error(msg, append(slices.Clip(attrs), "err", err)...)
		return 1
	}
	for _, le := range list {
		a := slices.Clip(attrs)
		if le.Pos.File != "" {
			a = append(a, "file", le.Pos.File)
		}
		if le.Pos.Line > 0 {
			a = append(a, "line", le.Pos.Line)
		}
		if le.Pos.Column > 0 {
			a = append(a, "col", le.Pos.Column)
		}
		if le.Rule != "" {
			a = append(a, "rule", le.Rule)
		}
		log.Error(msg, append(a, "code", le.Code, "err", le.Message)...)
	}
	return len(list)
}
