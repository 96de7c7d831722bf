package host

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/sdk"
)

// Inspector reports on an engine: its readiness, its rules and plugins,
// the Redis nodes and the live instances, for /readyz, gRPC health, the
// admin API and metrics. Engine.Inspect returns it.
type Inspector struct{ e *Engine }

// Inspect returns the engine's Inspector.
func (e *Engine) Inspect() *Inspector { return &e.inspect }

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
func (in *Inspector) PluginStatuses() []PluginStatus {
	plugins := in.e.gen.Load().plugins
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
func (in *Inspector) ReadyErr() error {
	var errs []error
	if err := in.e.cap.ReadyErr(); err != nil {
		if names := in.e.rulePlugins(); len(names) > 0 {
			err = fmt.Errorf("redis not ready; rules of plugin %s follow their on_error: %w", strings.Join(names, ", "), err)
		} else {
			err = fmt.Errorf("redis not ready: %w", err)
		}
		errs = append(errs, err)
	}
	if err := in.PluginsReady(); err != nil {
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
func (in *Inspector) PluginsReady() error {
	var errs []error
	for _, ps := range in.PluginStatuses() {
		if ps.Err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", ps.Name, ps.Err))
		}
	}
	return errors.Join(errs...)
}

// PluginInfos returns the Info of every plugin the engine can run.
func (in *Inspector) PluginInfos() []sdk.Info {
	plugins := in.e.gen.Load().plugins
	out := make([]sdk.Info, 0, len(plugins))
	for _, p := range plugins {
		out = append(out, p.alg.Info())
	}
	slices.SortFunc(out, func(a, b sdk.Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Available reports whether Redis answered the last calls (the circuit
// breaker is closed).
func (in *Inspector) Available() bool { return in.e.cap.Available() }

// ClusterSize returns the number of live ruled instances last seen in
// Redis (1 until a heartbeat has run).
func (in *Inspector) ClusterSize() int64 { return in.e.clusterSize.Load() }

// DenyCacheHits returns how many requests the deny cache has denied.
func (in *Inspector) DenyCacheHits() int64 { return in.e.deny.Hits() }

// RedisNodes returns what the capability's last probe found of each Redis
// master.
func (in *Inspector) RedisNodes() []capability.NodeHealth { return in.e.cap.Nodes() }

// RuleInfos describes the serving rules in order.
func (in *Inspector) RuleInfos() []RuleInfo {
	rs := in.e.gen.Load().set.Rules()
	out := make([]RuleInfo, len(rs))
	for i, r := range rs {
		out[i] = RuleInfo{
			Name: r.Name, Plugin: r.Plugin, OnError: string(r.OnError), Shadow: r.Shadow, Stop: r.Stop,
			Exempt: r.Exempt, Replaces: r.Replaces, DetailedMetric: r.Detailed, Dynamic: r.Dynamic(), When: r.When, Subject: r.Subject, Config: r.RawConfig(),
			File: r.Pos.File, Line: r.Pos.Line,
		}
	}
	return out
}

// RuleInfo describes one serving rule, for the admin API and status page.
type RuleInfo struct {
	Name    string `json:"name"`
	Plugin  string `json:"plugin"`
	OnError string `json:"on_error"`
	Shadow  bool   `json:"shadow"`
	Stop    bool   `json:"stop"`
	// Exempt, Replaces and DetailedMetric are the rule's exempt,
	// replaces and detailed_metric (omitted when unset).
	Exempt         bool           `json:"exempt,omitempty"`
	Replaces       []string       `json:"replaces,omitempty"`
	DetailedMetric bool           `json:"detailed_metric,omitempty"`
	Dynamic        bool           `json:"dynamic"`
	When           string         `json:"when"`
	Subject        string         `json:"subject"`
	Config         map[string]any `json:"config"`
	File           string         `json:"file"`
	Line           int            `json:"line"`
}
