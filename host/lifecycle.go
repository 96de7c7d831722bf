package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// LoadStatus describes the serving rule set and the last load attempt.
type LoadStatus struct {
	// Path is where the serving rules were loaded from.
	Path string
	// Rules is the number of serving rules.
	Rules int
	// LoadedAt is when the serving set was loaded.
	LoadedAt time.Time
	// LastError is the error of the last failed load, if the last load
	// failed; the previous set kept serving.
	LastError error
	// LastErrorAt is when that load failed.
	LastErrorAt time.Time
	// Loads and Failures count load attempts that succeeded and failed.
	Loads, Failures int64
}

// PluginLoader loads a third-party plugin that rule files declare under
// plugins: (a Wasm module or a process). The algorithm may implement
// Close(context.Context) error, called once no serving rule uses it.
type PluginLoader func(ctx context.Context, decl rules.PluginDecl) (sdk.Algorithm, error)

// ReadTimeout bounds how long a load waits for the rule files to be read:
// a file that blocks on read (a FIFO nobody writes) fails the load, and
// the old set keeps serving, instead of holding up every later load and
// Close.
const ReadTimeout = 10 * time.Second

// RuleSource is where a load reads its rule files: a path (FileRules), or
// files made in memory, such as envoy ratelimit configs translated from
// their files or pushed over xDS. Reload reads the source of the last
// successful load again.
type RuleSource struct {
	// Origin names the source in LoadStatus.Path and in logs: a path, or
	// "xds://host:port".
	Origin string
	// Read parses the rule files (rules.Parse, rules.ParseSources). It
	// returns a nil Files only when nothing could be read; its error is a
	// rules.ErrorList with every problem found.
	Read func(ctx context.Context) (*rules.Files, error)
}

// FileRules is the rule file at path, or the rule files of the directory
// at path (rules.Parse).
func FileRules(path string) RuleSource {
	return RuleSource{Origin: path, Read: func(context.Context) (*rules.Files, error) { return rules.Parse(path) }}
}

// Load compiles the rule files at path and, only if they are valid, makes
// them the serving set: LoadFrom(ctx, FileRules(path)).
func (e *Engine) Load(ctx context.Context, path string) (*rules.Set, error) {
	return e.LoadFrom(ctx, FileRules(path))
}

// LoadFrom compiles the rule files src reads and, only if they are valid,
// makes them the serving set. On error the old set keeps serving; the
// error is a rules.ErrorList with every problem and its position. The
// files are read within ctx and ReadTimeout, before the engine is locked:
// a read that never ends is left behind, and later loads and Close do not
// wait for it.
func (e *Engine) LoadFrom(ctx context.Context, src RuleSource) (*rules.Set, error) {
	files, perr := readRules(ctx, src)
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	st := *e.status.Load()
	g, err := e.compile(files, perr)
	if err != nil {
		st.LastError, st.LastErrorAt = err, time.Now()
		st.Failures++
		e.status.Store(&st)
		e.obs.Reload(err, len(e.gen.Load().set.Rules()))
		return nil, err
	}
	old := e.gen.Swap(g)
	e.release(old, g)
	e.deny.Clear() // limits may have changed
	// Leases belong to the old rules: give their unused permits back.
	ctx, cancel := context.WithTimeout(context.Background(), 2*e.cap.Timeout())
	e.returnRuleLeases(ctx)
	cancel()
	e.source = &src
	st = LoadStatus{Path: src.Origin, Rules: len(g.set.Rules()), LoadedAt: time.Now(), Loads: st.Loads + 1, Failures: st.Failures}
	e.status.Store(&st)
	e.obs.Reload(nil, len(g.set.Rules()))
	return g.set, nil
}

// readRules reads src within ctx and ReadTimeout. On time-out the read
// goes on in the background, and its result is dropped.
func readRules(ctx context.Context, src RuleSource) (*rules.Files, error) {
	ctx, cancel := context.WithTimeout(ctx, ReadTimeout)
	defer cancel()
	type parsed struct {
		files *rules.Files
		err   error
	}
	done := make(chan parsed, 1)
	go func() {
		files, err := src.Read(ctx)
		done <- parsed{files, err}
	}()
	select {
	case p := <-done:
		return p.files, p.err
	case <-ctx.Done():
		return nil, fmt.Errorf("host: reading the rule files at %s: %w (does a file block on read, a FIFO?)", src.Origin, context.Cause(ctx))
	}
}

// compile takes the parsed rule files (rules.Parse's results), loads the
// third-party plugins they declare (reusing those already loaded), and compiles the rules against
// them. On error, plugins loaded for this attempt alone are released.
func (e *Engine) compile(files *rules.Files, err error) (*generation, error) {
	if files == nil {
		return nil, err
	}
	g := &generation{engine: e, plugins: make(map[string]*plugin, len(e.builtins))}
	for name, p := range e.builtins {
		g.plugins[name] = p
	}
	loadErrs := LoadDeclared(files.Plugins(), func(name string) bool { _, ok := e.builtins[name]; return ok },
		func(decl rules.PluginDecl) error {
			p, err := e.thirdParty(decl)
			if err == nil {
				g.plugins[decl.Name] = p
			}
			return err
		})
	set, err := rules.Compile(files, g)
	if err != nil || len(loadErrs) > 0 {
		e.release(g, e.gen.Load())
		return nil, rules.Merge(err, loadErrs)
	}
	g.set = set
	return g, nil
}

// LoadDeclared calls load for every plugin decls declare, in order, and
// returns a positioned error for each that takes a built-in's name or does
// not load. The engine and `ruled check` load rule files' plugins with it.
func LoadDeclared(decls []rules.PluginDecl, builtin func(name string) bool, load func(rules.PluginDecl) error) rules.ErrorList {
	var errs rules.ErrorList
	for _, d := range decls {
		err := errors.New("the name of a built-in plugin")
		if !builtin(d.Name) {
			err = load(d)
		}
		if err != nil {
			errs = append(errs, &rules.Error{Pos: d.Pos, Code: rules.CodePluginLoad, Message: fmt.Sprintf("plugin %q: %v", d.Name, err)})
		}
	}
	return errs
}

// pluginKey identifies a loaded plugin: the same declaration (name, file,
// pin) of a file with the same content (digest) reuses the loaded plugin
// across reloads; a file that changed on disk is loaded again.
func pluginKey(d rules.PluginDecl, digest string) string {
	return d.Name + "\x00" + d.Wasm + "\x00" + d.Process + "\x00" + d.SHA256 + "\x00" + digest
}

// PluginFile returns the file a plugin declaration names and the most
// bytes ruled reads of it (pluginfile.MaxWasm or MaxExecutable).
func PluginFile(d rules.PluginDecl) (path string, maxSize int64) {
	if d.Process != "" {
		return d.Process, pluginfile.MaxExecutable
	}
	return d.Wasm, pluginfile.MaxWasm
}

// thirdParty returns the loaded plugin for decl, loading it if needed. The
// file is hashed at every load (a regular file within its size cap, read
// through a limited reader): a file that no longer matches its pin fails
// the load here, even when the plugin loaded from it before still runs,
// and a file whose content changed is loaded again.
func (e *Engine) thirdParty(decl rules.PluginDecl) (*plugin, error) {
	if e.loadPlugin == nil {
		return nil, errors.New("this ruled cannot load third-party plugins")
	}
	path, maxSize := PluginFile(decl)
	digest, err := pluginfile.Digest(path, maxSize)
	if err != nil {
		return nil, err
	}
	if err := pluginfile.CheckPin(path, decl.SHA256, digest); err != nil {
		return nil, err
	}
	key := pluginKey(decl, digest)
	if p, ok := e.loaded[key]; ok {
		return p, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alg, err := e.loadPlugin(ctx, decl)
	if err != nil {
		return nil, err
	}
	reg, err := e.cap.Register(decl.Name, alg.Info().Scripts)
	if err != nil {
		ClosePlugin(alg, e.log)
		return nil, err
	}
	p := &plugin{alg: alg, reg: reg, key: key}
	e.loaded[key] = p
	e.log.Info("plugin started", startedAttrs(decl, alg.Info().Version)...)
	return p, nil
}

// startedAttrs are the attributes of a "plugin started" line: the plugin's
// name, its file (wasm or process, whichever it has) and its version when
// it says one. Attributes that do not apply are left out, not logged empty.
func startedAttrs(decl rules.PluginDecl, version string) []any {
	attrs := []any{"plugin", decl.Name}
	if decl.Wasm != "" {
		attrs = append(attrs, "wasm", decl.Wasm)
	}
	if decl.Process != "" {
		attrs = append(attrs, "process", decl.Process)
	}
	if version != "" {
		attrs = append(attrs, "version", version)
	}
	return attrs
}

// release closes the third-party plugins of from that keep is not using.
// Checks still running on from finish first: a plugin's Close must let
// in-flight calls end (drivers close their instances as calls return).
func (e *Engine) release(from, keep *generation) {
	if from == nil {
		return
	}
	for name, p := range from.plugins {
		if p.key == "" {
			continue
		}
		if kp, ok := keep.plugins[name]; ok && kp == p {
			continue
		}
		if e.loaded[p.key] != p {
			continue
		}
		delete(e.loaded, p.key)
		ClosePlugin(p.alg, e.log)
		e.log.Info("plugin stopped", "plugin", name)
	}
}

// ClosePlugin stops a third-party plugin (one that has Close), logging a
// failure, within 10 seconds.
func ClosePlugin(alg sdk.Algorithm, log *slog.Logger) {
	if c, ok := alg.(interface{ Close(context.Context) error }); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			log.Warn("closing plugin", "plugin", alg.Info().Name, "err", err)
		}
	}
}

// Close returns leased permits and stops every third-party plugin.
func (e *Engine) Close(ctx context.Context) {
	e.returnRuleLeases(ctx)
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	e.release(e.gen.Load(), &generation{})
}

// Reload loads the rules again from the source of the last successful
// load and returns the number of serving rules. It logs the outcome, naming
// trigger (what asked for the reload: "SIGHUP", "admin API", "file
// change").
func (e *Engine) Reload(ctx context.Context, trigger string) (int, error) {
	n, err := e.reload(ctx)
	e.logReload(trigger, n, err)
	return n, err
}

// reload is Reload without the log line.
func (e *Engine) reload(ctx context.Context) (int, error) {
	e.loadMu.Lock()
	src := e.source
	e.loadMu.Unlock()
	if src == nil {
		return 0, errors.New("host: no rules loaded yet")
	}
	set, err := e.LoadFrom(ctx, *src)
	if err != nil {
		return 0, err
	}
	return len(set.Rules()), nil
}

// Status returns the state of the serving rule set and the last load.
func (e *Engine) Status() LoadStatus { return *e.status.Load() }

// Rules returns the serving rule set.
func (e *Engine) Rules() *rules.Set { return e.gen.Load().set }

// Preload loads every plugin's scripts into Redis, so that the first
// decisions do not pay for it. Failure is not fatal: scripts load on demand.
func (e *Engine) Preload(ctx context.Context) error {
	var errs []error
	for _, p := range e.gen.Load().plugins {
		errs = append(errs, p.reg.Preload(ctx))
	}
	return errors.Join(errs...)
}

// logReload logs a reload's outcome. A failed reload gets one error line
// per problem (LogRuleErrors), then one line that says the previous rules
// keep serving; log processors see each problem as a record of its own.
func (e *Engine) logReload(trigger string, n int, err error) {
	if err == nil {
		e.log.Info("rules reloaded", "trigger", trigger, "rules", n)
		return
	}
	var list rules.ErrorList
	if !errors.As(err, &list) {
		e.log.Error("rules reload failed; the previous rules keep serving", "trigger", trigger, "err", err)
		return
	}
	LogRuleErrors(e.log, "rules reload error", list, "trigger", trigger)
	e.log.Error("rules reload failed; the previous rules keep serving", "trigger", trigger, "errors", len(list))
}

// LoadError is one positioned rule-file error, as data.
type LoadError struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Column  int    `json:"column"`
	Rule    string `json:"rule,omitempty"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// LoadErrors turns a load error into data: one entry per positioned error,
// or a single entry without a position for any other error.
func LoadErrors(err error) []LoadError {
	if err == nil {
		return nil
	}
	var list rules.ErrorList
	if !errors.As(err, &list) {
		return []LoadError{{Code: "load", Message: err.Error()}}
	}
	out := make([]LoadError, len(list))
	for i, e := range list {
		out[i] = LoadError{File: e.Pos.File, Line: e.Pos.Line, Column: e.Pos.Column, Rule: e.Rule, Code: e.Code, Message: e.Message}
	}
	return out
}
