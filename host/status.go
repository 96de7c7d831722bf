package host

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// StatusReporter is implemented by plugins that can stop working after they
// were loaded (a Wasm module whose instances fail to start, a process
// plugin that crashed). Built-in native plugins do not implement it: they
// are always OK.
type StatusReporter interface {
	// Status returns nil while the plugin can decide, else why it cannot.
	Status() error
}

// PluginStatus is one plugin's health.
type PluginStatus struct {
	Name string
	// Err is nil when the plugin can decide.
	Err error
}

// PluginStatuses returns every plugin's health, sorted by name.
func (e *Engine) PluginStatuses() []PluginStatus {
	plugins := e.gen.Load().plugins
	out := make([]PluginStatus, 0, len(plugins))
	for name, p := range plugins {
		ps := PluginStatus{Name: name}
		if r, ok := p.alg.(StatusReporter); ok {
			ps.Err = r.Status()
		}
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b PluginStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ReadyErr returns nil when decisions can be made normally: Redis is
// ready (capability.Capability.ReadyErr) and every plugin can decide
// (PluginsReady). When Redis is not, the reason also names the plugins
// whose rules follow their on_error meanwhile.
func (e *Engine) ReadyErr() error {
	var errs []error
	if err := e.cap.ReadyErr(); err != nil {
		if names := e.rulePlugins(); len(names) > 0 {
			err = fmt.Errorf("redis not ready; rules of plugin %s follow their on_error: %w", strings.Join(names, ", "), err)
		} else {
			err = fmt.Errorf("redis not ready: %w", err)
		}
		errs = append(errs, err)
	}
	if err := e.PluginsReady(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// rulePlugins returns the names of the plugins the serving rules use,
// sorted.
func (e *Engine) rulePlugins() []string {
	var names []string
	for _, r := range e.gen.Load().set.Rules() {
		if !slices.Contains(names, r.Plugin) {
			names = append(names, r.Plugin)
		}
	}
	slices.Sort(names)
	return names
}

// PluginsReady returns nil when every plugin can decide, else an error that
// names each one that cannot. Readiness is "Redis answers and all plugins
// are OK".
func (e *Engine) PluginsReady() error {
	var errs []error
	for _, ps := range e.PluginStatuses() {
		if ps.Err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", ps.Name, ps.Err))
		}
	}
	return errors.Join(errs...)
}
