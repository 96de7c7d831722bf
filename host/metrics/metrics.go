// Package metrics is ruled's Prometheus instrumentation. A Metrics value owns
// a private registry (nothing is registered globally), implements
// host.Observer for the engine, and provides the capability's Observe and
// OnAvailability callbacks. Handler serves the registry at /metrics;
// Snapshot gives the same counters as data for the status page.
//
// Label values are rule names, plugin names, outcomes and error classes:
// sets bounded by the configuration. Subjects never become label values.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/sdk"
)

// LatencyBuckets are the histogram buckets of check and Redis call
// durations, in seconds: 50 µs to 1 s.
var LatencyBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
	100e-3, 250e-3, 500e-3, 1,
}

// outcomes lists host.Outcome values in the order of ruleMetrics.outcomes.
var outcomes = [...]host.Outcome{
	host.OutcomeAllowed, host.OutcomeDenied, host.OutcomeShadowDenied,
	host.OutcomeDegradedAllow, host.OutcomeDegradedDeny, host.OutcomeDegradedLocal, host.OutcomeBadRequest,
	host.OutcomeExempt, host.OutcomeCancelled,
}

func outcomeIndex(o host.Outcome) int {
	switch o {
	case host.OutcomeAllowed:
		return 0
	case host.OutcomeDenied:
		return 1
	case host.OutcomeShadowDenied:
		return 2
	case host.OutcomeDegradedAllow:
		return 3
	case host.OutcomeDegradedDeny:
		return 4
	case host.OutcomeDegradedLocal:
		return 5
	case host.OutcomeBadRequest:
		return 6
	case host.OutcomeExempt:
		return 7
	case host.OutcomeCancelled:
		return 8
	}
	return -1
}

// classes lists the capability error classes in the order of
// pluginMetrics.errs.
var classes = [...]capability.Class{
	capability.ClassTimeout, capability.ClassConnection, capability.ClassScript, capability.ClassRefused,
	capability.ClassIsolation, capability.ClassBusy, capability.ClassOOM, capability.ClassQuarantine,
}

func classIndex(c capability.Class) int {
	for i, k := range classes {
		if k == c {
			return i
		}
	}
	return -1
}

// Options configure New.
type Options struct {
	// Version is reported by ruled_build_info. Default "dev".
	Version string
}

// Engine is what Bind reads from the engine; *host.Inspector (host.Engine.Inspect) implements it.
type Engine interface {
	ClusterSize() int64
	RedisNodes() []capability.NodeHealth
	RuleInfos() []host.RuleInfo
	PluginInfos() []sdk.Info
}

// Metrics holds ruled's metrics on a private registry. It is safe for
// concurrent use; the methods called on the decision path (Decision, Check,
// RedisCall) touch only cached counters after a rule's or plugin's first
// event.
type Metrics struct {
	reg     *prometheus.Registry
	version string

	decisions   *prometheus.CounterVec
	denyCache   *prometheus.CounterVec
	leaseUnits  *prometheus.CounterVec
	slots       *prometheus.CounterVec
	subjects    *prometheus.CounterVec
	checkDur    prometheus.Histogram
	redisDur    *prometheus.HistogramVec
	redisErrs   *prometheus.CounterVec
	pluginErrs  *prometheus.CounterVec
	redisUp     prometheus.Gauge
	nodeDur     *prometheus.HistogramVec
	nodeErrs    *prometheus.CounterVec
	reloads     *prometheus.CounterVec
	rulesLoaded prometheus.Gauge
	lastReload  prometheus.Gauge
	pools       *poolCollector

	subjectCount atomic.Int64 // subjects with counters of their own, across rules (ruled_subject_decisions_total)
	rules        sync.Map     // rule name -> *ruleMetrics
	plugins      sync.Map     // plugin name -> *pluginMetrics
	nodes        sync.Map     // Redis master -> *nodeMetrics
	engine       atomic.Pointer[Engine]
	up           atomic.Bool
}

type ruleMetrics struct {
	outcomes  [len(outcomes)]prometheus.Counter
	denyCache prometheus.Counter

	// The per-subject counters of a rule with detailed_metric, created on
	// first use (ruled_subject_decisions_total), and those of the subjects
	// beyond MaxSubjectSeries.
	subjectsMu sync.RWMutex
	subjects   map[string]*subjectCounters
	other      *subjectCounters
}

// subjectCounters are the counters of one subject label, by outcome (the
// last for an outcome this version does not know), created on first use.
type subjectCounters struct {
	label    string
	counters [len(outcomes) + 1]atomic.Pointer[prometheus.Counter]
}

type nodeMetrics struct {
	dur  prometheus.Histogram
	errs prometheus.Counter
}

type pluginMetrics struct {
	dur    prometheus.Observer
	errs   [len(classes)]prometheus.Counter
	plugin prometheus.Counter
}

var _ host.Observer = (*Metrics)(nil)

// New returns Metrics with every ruled metric, the Go runtime's and the
// process's registered on a new private registry.
func New(o Options) *Metrics {
	if o.Version == "" {
		o.Version = "dev"
	}
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		version: o.Version,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_decisions_total",
			Help: "Rule decisions by rule and outcome (allowed, denied, shadow_denied, degraded_allow, degraded_deny, degraded_local, bad_request).",
		}, []string{"rule", "outcome"}),
		denyCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_deny_cache_hits_total",
			Help: "Denials answered by the in-process deny cache instead of Redis, by rule (also counted as denied decisions).",
		}, []string{"rule"}),
		leaseUnits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_client_lease_units_total",
			Help: "Units of client leases (POST /v1/lease) by rule and event: taken, returned unused, late (a return refused near the lease's deadline; its units stay counted).",
		}, []string{"rule", "event"}),
		slots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_slot_events_total",
			Help: "Releases and renewals of in-flight slots (POST /v1/release, /v1/renew, Envoy's access log) by rule and event: released, not_held (a release found none held), renewed, lost (a renewal refused: the lease had expired and the slot was taken), failed (the plugin failed).",
		}, []string{"rule", "event"}),
		subjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_subject_decisions_total",
			Help: "Decisions of rules with detailed_metric: true, by rule, subject and outcome. At most MaxSubjectSeries rule and subject pairs are kept; later subjects count under subject=\"_other\".",
		}, []string{"rule", "subject", "outcome"}),
		checkDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ruled_check_duration_seconds",
			Help:    "Time to decide one check, all matching rules included.",
			Buckets: LatencyBuckets,
		}),
		redisDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ruled_redis_call_duration_seconds",
			Help:    "Duration of plugin script calls to Redis, by plugin (calls refused by the open circuit are not counted).",
			Buckets: LatencyBuckets,
		}, []string{"plugin"}),
		redisErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_redis_errors_total",
			Help: "Failed plugin script calls by plugin and class (timeout, connection, script, refused).",
		}, []string{"plugin", "class"}),
		pluginErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_plugin_errors_total",
			Help: "Script calls that failed through the plugin's fault (classes script and refused), by plugin.",
		}, []string{"plugin"}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ruled_redis_up",
			Help: "1 while the last active probe (every second) found every master answering, on a Cluster with cluster_state:ok, else 0.",
		}),
		nodeDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ruled_redis_node_call_duration_seconds",
			Help:    "Duration of plugin script calls by the Redis master they went to (calls refused by its open circuit are not counted).",
			Buckets: LatencyBuckets,
		}, []string{"node"}),
		nodeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_redis_node_errors_total",
			Help: "Failed plugin script calls by the Redis master they went to.",
		}, []string{"node"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ruled_rule_reloads_total",
			Help: "Rule load attempts by result (ok, error); the first load at start-up counts.",
		}, []string{"result"}),
		rulesLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ruled_rules_loaded",
			Help: "Number of rules serving.",
		}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ruled_rules_last_reload_success_timestamp_seconds",
			Help: "Unix time of the last successful rule load.",
		}),
		pools: &poolCollector{
			desc: prometheus.NewDesc("ruled_plugin_pool_instances",
				"Instances of a pooled plugin (Wasm driver) by state (idle, busy).", []string{"plugin", "state"}, nil),
			stats: map[string]func() (int, int){},
		},
	}
	m.up.Store(true)
	m.redisUp.Set(1)
	m.reloads.WithLabelValues("ok")
	m.reloads.WithLabelValues("error")
	instances := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ruled_instances",
		Help: "Live ruled instances sharing this Redis, as last seen by the heartbeat (on_error: local divides limits by it).",
	}, func() float64 {
		if e := m.engine.Load(); e != nil {
			return float64((*e).ClusterSize())
		}
		return 1
	})
	build := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "ruled_build_info",
		Help:        "Always 1; the labels say which ruled build is running.",
		ConstLabels: prometheus.Labels{"version": o.Version, "goversion": runtime.Version()},
	}, func() float64 { return 1 })
	m.reg.MustRegister(m.decisions, m.denyCache, m.leaseUnits, m.slots, m.subjects, m.checkDur, m.redisDur, m.redisErrs, m.pluginErrs,
		m.redisUp, m.nodeDur, m.nodeErrs, &nodeCollector{m: m}, m.reloads, m.rulesLoaded, m.lastReload, m.pools, instances, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry returns the private registry, to gather from or to add
// collectors to.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus exposition formats.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Bind makes the metrics read the engine: ruled_instances reports its
// cluster size, and the series of every plugin and every serving rule exist
// (at zero) from the start or the rule's load, not only from their first
// event, so that rate() and absence alerts work. Call it once the engine
// exists (the engine takes the Metrics as its Observer before that).
func (m *Metrics) Bind(e Engine) {
	m.engine.Store(&e)
	for _, in := range e.PluginInfos() {
		m.plugin(in.Name)
	}
	m.touchRules()
}

func (m *Metrics) touchRules() {
	e := m.engine.Load()
	if e == nil {
		return
	}
	for _, r := range (*e).RuleInfos() {
		m.rule(r.Name)
	}
}

// rule returns a rule's cached counters, creating them on first use.
func (m *Metrics) rule(name string) *ruleMetrics {
	if v, ok := m.rules.Load(name); ok {
		return v.(*ruleMetrics)
	}
	rm := &ruleMetrics{denyCache: m.denyCache.WithLabelValues(name)}
	for i, o := range outcomes {
		rm.outcomes[i] = m.decisions.WithLabelValues(name, string(o))
	}
	v, _ := m.rules.LoadOrStore(name, rm)
	return v.(*ruleMetrics)
}

// node returns a Redis master's cached metrics, creating them on first use.
func (m *Metrics) node(name string) *nodeMetrics {
	if v, ok := m.nodes.Load(name); ok {
		return v.(*nodeMetrics)
	}
	nm := &nodeMetrics{dur: m.nodeDur.WithLabelValues(name).(prometheus.Histogram), errs: m.nodeErrs.WithLabelValues(name)}
	v, _ := m.nodes.LoadOrStore(name, nm)
	return v.(*nodeMetrics)
}

// nodeCollector reports each Redis master the last probe found, at every
// scrape: a master that left the topology leaves the metrics with it.
type nodeCollector struct{ m *Metrics }

var (
	nodeUpDesc = prometheus.NewDesc("ruled_redis_node_up",
		"1 while the Redis master answered the last active probe (on a Cluster, with cluster_state:ok), else 0.", []string{"node"}, nil)
	nodeCircuitDesc = prometheus.NewDesc("ruled_redis_node_circuit_open",
		"1 while calls to the Redis master fail fast (its circuit breaker is open), else 0.", []string{"node"}, nil)
)

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- nodeUpDesc; ch <- nodeCircuitDesc }

// Collect implements prometheus.Collector.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.m.engine.Load()
	if e == nil {
		return
	}
	for _, n := range (*e).RedisNodes() {
		ch <- prometheus.MustNewConstMetric(nodeUpDesc, prometheus.GaugeValue, b2f(n.Up), n.Node)
		ch <- prometheus.MustNewConstMetric(nodeCircuitDesc, prometheus.GaugeValue, b2f(n.CircuitOpen), n.Node)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// plugin returns a plugin's cached metrics, creating them on first use.
func (m *Metrics) plugin(name string) *pluginMetrics {
	if v, ok := m.plugins.Load(name); ok {
		return v.(*pluginMetrics)
	}
	pm := &pluginMetrics{dur: m.redisDur.WithLabelValues(name), plugin: m.pluginErrs.WithLabelValues(name)}
	for i, c := range classes {
		pm.errs[i] = m.redisErrs.WithLabelValues(name, string(c))
	}
	v, _ := m.plugins.LoadOrStore(name, pm)
	return v.(*pluginMetrics)
}

// Decision implements host.Observer.
func (m *Metrics) Decision(rule, _ string, outcome host.Outcome, cached bool) {
	rm := m.rule(rule)
	if i := outcomeIndex(outcome); i >= 0 {
		rm.outcomes[i].Inc()
	} else {
		m.decisions.WithLabelValues(rule, string(outcome)).Inc()
	}
	if cached {
		rm.denyCache.Inc()
	}
}

// MaxSubjectSeries bounds the rule and subject pairs of
// ruled_subject_decisions_total, so that a rule with detailed_metric on a
// high-cardinality subject cannot grow the metrics without end.
const MaxSubjectSeries = 10_000

// OtherSubject is the subject label of the decisions of subjects beyond
// MaxSubjectSeries.
const OtherSubject = "_other"

// SubjectDecision implements host.SubjectObserver. A subject seen before
// costs a map lookup under a read lock and an atomic load; the first
// decision of a subject takes one of MaxSubjectSeries places, or counts
// under OtherSubject when they are all taken.
func (m *Metrics) SubjectDecision(rule, subject string, outcome host.Outcome) {
	rm := m.rule(rule)
	rm.subjectsMu.RLock()
	sc := rm.subjects[subject]
	rm.subjectsMu.RUnlock()
	if sc == nil {
		sc = m.newSubject(rm, subject)
	}
	i := outcomeIndex(outcome)
	if i < 0 {
		i = len(outcomes)
	}
	c := sc.counters[i].Load()
	if c == nil {
		counter := m.subjects.WithLabelValues(rule, sc.label, string(outcome))
		sc.counters[i].CompareAndSwap(nil, &counter)
		c = sc.counters[i].Load()
	}
	(*c).Inc()
}

// newSubject returns the counters of a subject first seen: its own, or
// the rule's OtherSubject counters when MaxSubjectSeries are counted.
func (m *Metrics) newSubject(rm *ruleMetrics, subject string) *subjectCounters {
	rm.subjectsMu.Lock()
	defer rm.subjectsMu.Unlock()
	if sc := rm.subjects[subject]; sc != nil {
		return sc
	}
	if m.subjectCount.Add(1) > MaxSubjectSeries {
		m.subjectCount.Add(-1)
		if rm.other == nil {
			rm.other = &subjectCounters{label: OtherSubject}
		}
		return rm.other
	}
	if rm.subjects == nil {
		rm.subjects = map[string]*subjectCounters{}
	}
	sc := &subjectCounters{label: subject}
	rm.subjects[subject] = sc
	return sc
}

// LeaseUnits implements host.LeaseObserver.
func (m *Metrics) LeaseUnits(rule string, event host.LeaseEvent, units int64) {
	m.leaseUnits.WithLabelValues(rule, string(event)).Add(float64(units))
}

// Slot implements host.SlotObserver.
func (m *Metrics) Slot(rule string, event host.SlotEvent) {
	m.slots.WithLabelValues(rule, string(event)).Inc()
}

// Check implements host.Observer.
func (m *Metrics) Check(took time.Duration, _ bool) { m.checkDur.Observe(took.Seconds()) }

// Reload implements host.Observer.
func (m *Metrics) Reload(err error, rules int) {
	m.rulesLoaded.Set(float64(rules))
	if err != nil {
		m.reloads.WithLabelValues("error").Inc()
		return
	}
	m.reloads.WithLabelValues("ok").Inc()
	m.lastReload.SetToCurrentTime()
	m.touchRules()
}

// RedisCall is the capability's Options.Observe: it times every script call
// and counts failures by class. Calls the open circuit refused never reached
// Redis and are not counted here (their decisions count as degraded).
func (m *Metrics) RedisCall(plugin, _, node string, took time.Duration, err error) {
	if err != nil && errors.Is(err, capability.ErrCircuitOpen) {
		return
	}
	pm := m.plugin(plugin)
	class := capability.ClassOf(err)
	var nm *nodeMetrics
	if node != "" {
		nm = m.node(node)
	}
	if class != capability.ClassQuarantine { // refused before Redis: no duration
		pm.dur.Observe(took.Seconds())
		if nm != nil {
			nm.dur.Observe(took.Seconds())
		}
	}
	if err == nil {
		return
	}
	if nm != nil {
		nm.errs.Inc()
	}
	if class == "" {
		class = capability.ClassConnection
	}
	if i := classIndex(class); i >= 0 {
		pm.errs[i].Inc()
	} else {
		m.redisErrs.WithLabelValues(plugin, string(class)).Inc()
	}
	if class == capability.ClassScript || class == capability.ClassRefused {
		pm.plugin.Inc()
	}
}

// RedisAvailable is the capability's Options.OnAvailability: it sets
// ruled_redis_up.
func (m *Metrics) RedisAvailable(up bool) {
	m.up.Store(up)
	if up {
		m.redisUp.Set(1)
	} else {
		m.redisUp.Set(0)
	}
}

// TLSCertificate reports the served TLS certificate's NotAfter, as
// notAfter returns it at each scrape, as the gauge
// ruled_tls_certificate_expiry_seconds (Unix seconds). Call it once, when
// TLS is on; a second call is an error.
func (m *Metrics) TLSCertificate(notAfter func() time.Time) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "ruled_tls_certificate_expiry_seconds",
		Help: "Unix time at which the served TLS certificate expires (its NotAfter); present only with TLS on.",
	}, func() float64 { return float64(notAfter().Unix()) })
	if err := m.reg.Register(g); err != nil {
		return fmt.Errorf("metrics: ruled_tls_certificate_expiry_seconds: %w", err)
	}
	return nil
}

// RegisterPool reports a pooled plugin's instances as
// ruled_plugin_pool_instances{plugin, state="idle"|"busy"}: stats is called
// at every scrape and must be cheap and safe for concurrent use. It is the
// hook for a driver that pools instances (the Wasm driver: idle is
// Stats().Idle, busy is Instances-Idle) to call for each plugin it loads;
// registering a plugin again replaces its function, and a nil stats
// removes it (call that when the plugin is closed).
func (m *Metrics) RegisterPool(plugin string, stats func() (idle, busy int)) {
	m.pools.mu.Lock()
	defer m.pools.mu.Unlock()
	if stats == nil {
		delete(m.pools.stats, plugin)
		return
	}
	m.pools.stats[plugin] = stats
}

// poolCollector asks each registered pool for its state once per scrape.
type poolCollector struct {
	desc  *prometheus.Desc
	mu    sync.Mutex
	stats map[string]func() (idle, busy int)
}

// Describe implements prometheus.Collector.
func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for plugin, f := range c.stats {
		idle, busy := f()
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(idle), plugin, "idle")
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(busy), plugin, "busy")
	}
}

// Stats is a snapshot of the counters, as the status page reads them.
type Stats struct {
	// Time is when the snapshot was taken.
	Time time.Time `json:"time"`
	// Version is ruled's version.
	Version string `json:"version"`
	// RedisUp is ruled_redis_up: the last probe found every master answering.
	RedisUp bool `json:"redis_up"`
	// Instances is ruled_instances.
	Instances int64 `json:"instances"`
	// Checks is the number of checks decided.
	Checks uint64 `json:"checks"`
	// Reloads counts rule loads by result ("ok", "error").
	Reloads map[string]uint64 `json:"reloads"`
	// Rules holds every rule's counters that has been loaded or decided
	// since start, by rule name.
	Rules map[string]RuleStats `json:"rules"`
	// Plugins holds every plugin's Redis call counters, by plugin name.
	Plugins map[string]PluginStats `json:"plugins"`
	// Nodes holds each Redis master the last probe found, with the
	// counters of the calls that went to it.
	Nodes []NodeStats `json:"redis_nodes"`
}

// NodeStats are one Redis master's health and call counters.
type NodeStats struct {
	capability.NodeHealth
	// Calls counts script calls that went to it.
	Calls uint64 `json:"calls"`
	// Errors counts those that failed.
	Errors uint64 `json:"errors"`
	// MeanCallMS is their mean duration, in milliseconds.
	MeanCallMS float64 `json:"mean_call_ms"`
}

// RuleStats are one rule's counters.
type RuleStats struct {
	// Outcomes counts decisions by host.Outcome.
	Outcomes map[string]uint64 `json:"outcomes"`
	// DenyCacheHits counts the denials the deny cache answered.
	DenyCacheHits uint64 `json:"deny_cache_hits"`
}

// PluginStats are one plugin's Redis call counters.
type PluginStats struct {
	// Calls counts script calls that reached Redis.
	Calls uint64 `json:"calls"`
	// Errors counts failed calls by class.
	Errors map[string]uint64 `json:"errors"`
}

// Snapshot returns the current counters. It is meant for a status page
// polling every second or so, not for the decision path.
func (m *Metrics) Snapshot() Stats {
	s := Stats{
		Time:    time.Now().UTC(),
		Version: m.version,
		RedisUp: m.up.Load(),
		Checks:  histogramCount(m.checkDur),
		Reloads: map[string]uint64{
			"ok":    counterValue(m.reloads.WithLabelValues("ok")),
			"error": counterValue(m.reloads.WithLabelValues("error")),
		},
		Rules:     map[string]RuleStats{},
		Plugins:   map[string]PluginStats{},
		Instances: 1,
	}
	if e := m.engine.Load(); e != nil {
		s.Instances = (*e).ClusterSize()
	}
	m.rules.Range(func(k, v any) bool {
		rm := v.(*ruleMetrics)
		rs := RuleStats{Outcomes: make(map[string]uint64, len(outcomes)), DenyCacheHits: counterValue(rm.denyCache)}
		for i, o := range outcomes {
			rs.Outcomes[string(o)] = counterValue(rm.outcomes[i])
		}
		s.Rules[k.(string)] = rs
		return true
	})
	m.plugins.Range(func(k, v any) bool {
		pm := v.(*pluginMetrics)
		ps := PluginStats{Errors: make(map[string]uint64, len(classes))}
		if h, ok := pm.dur.(prometheus.Histogram); ok {
			ps.Calls = histogramCount(h)
		}
		for i, c := range classes {
			ps.Errors[string(c)] = counterValue(pm.errs[i])
		}
		s.Plugins[k.(string)] = ps
		return true
	})
	if e := m.engine.Load(); e != nil {
		for _, n := range (*e).RedisNodes() {
			ns := NodeStats{NodeHealth: n}
			if v, ok := m.nodes.Load(n.Node); ok {
				nm := v.(*nodeMetrics)
				var sum float64
				ns.Calls, sum = histogramCountSum(nm.dur)
				if ns.Calls > 0 {
					ns.MeanCallMS = sum * 1000 / float64(ns.Calls)
				}
				ns.Errors = counterValue(nm.errs)
			}
			s.Nodes = append(s.Nodes, ns)
		}
	}
	return s
}

func counterValue(c prometheus.Counter) uint64 {
	var d dto.Metric
	if err := c.Write(&d); err != nil || d.Counter == nil {
		return 0
	}
	return uint64(d.Counter.GetValue())
}

func histogramCount(h prometheus.Histogram) uint64 {
	n, _ := histogramCountSum(h)
	return n
}

// histogramCountSum returns how many observations h has and their sum.
func histogramCountSum(h prometheus.Histogram) (uint64, float64) {
	var d dto.Metric
	if err := h.Write(&d); err != nil || d.Histogram == nil {
		return 0, 0
	}
	return d.Histogram.GetSampleCount(), d.Histogram.GetSampleSum()
}

// Status is what GET /v1/admin/stats answers: the counters, where Redis is
// and whether ruled is ready.
type Status struct {
	Stats
	// Redis says where the Redis is (store.Describe).
	Redis string `json:"redis"`
	// Ready is empty when ruled is ready, else why it is not.
	Ready string `json:"ready,omitempty"`
}

// StatusFunc returns the function behind GET /v1/admin/stats. ready is the
// readiness check (/readyz); nil means always ready.
func (m *Metrics) StatusFunc(redis string, ready func(context.Context) error) func(context.Context) any {
	return func(ctx context.Context) any {
		st := Status{Stats: m.Snapshot(), Redis: redis}
		if ready != nil {
			if err := ready(ctx); err != nil {
				st.Ready = err.Error()
			}
		}
		return st
	}
}
