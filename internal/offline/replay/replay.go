// Package replay runs recorded requests through rules in the time they
// were recorded, on the plugins' local models (host.Simulator),
// and counts what the rules would have decided: `ruled replay`.
//
// Time never goes back in a replay: a request recorded before the one
// replayed last (a log written as requests start, or several logs merged)
// is replayed at the later time, and counted as out of order; the
// largest such step back is reported with its line, since a large one
// (logs concatenated out of order) crowds requests into one instant.
package replay

import (
	"cmp"
	"slices"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/rules"
)

// DefaultTop is how many subjects and hours a report lists per rule
// unless Options.Top says otherwise.
const DefaultTop = 10

// Options configure a Replayer.
type Options struct {
	// Top is how many of the most denied subjects and of the hours with
	// the most denials each rule lists. Default DefaultTop.
	Top int
}

// Replayer replays checks and counts their decisions. It is not safe for
// concurrent use.
type Replayer struct {
	top   int
	sim   *host.Simulator
	rules []*ruleStats
	index map[string]*ruleStats // by rule name
	res   host.Result

	checks, denied, outOfOrder int64
	first, now                 int64 // Unix µs
	started                    bool
	stepBack                   int64 // largest step back in time, µs
	stepBackLine               int   // where it was
}

// ruleStats is what one rule decided.
type ruleStats struct {
	rule                  *rules.Rule
	matched, denied, errs int64
	second, minute        rate             // requests matched
	subjects              map[string]int64 // denials by subject
	hours                 map[int64]int64  // denials by Unix hour
}

// rate counts events per period of fixed length, and keeps the busiest.
type rate struct {
	period      int64 // µs
	cur, n      int64 // current period (start / length) and its count
	peak, peakN int64 // busiest period and its count
}

func (r *rate) add(nowUS int64) {
	p := nowUS / r.period
	if p != r.cur {
		r.cur, r.n = p, 0
	}
	r.n++
	if r.n > r.peakN {
		r.peak, r.peakN = p, r.n
	}
}

// New returns a replayer of set's rules, whose plugins must all have a
// local model (host.ErrNoModel).
func New(set *rules.Set, o Options) (*Replayer, error) {
	sim, err := host.NewSimulator(set)
	if err != nil {
		return nil, err
	}
	if o.Top <= 0 {
		o.Top = DefaultTop
	}
	r := &Replayer{top: o.Top, sim: sim, index: map[string]*ruleStats{}}
	for _, rule := range set.Rules() {
		st := &ruleStats{rule: rule, subjects: map[string]int64{}, hours: map[int64]int64{},
			second: rate{period: time.Second.Microseconds(), cur: -1},
			minute: rate{period: time.Minute.Microseconds(), cur: -1}}
		r.rules = append(r.rules, st)
		r.index[rule.Name] = st
	}
	return r, nil
}

// Check replays req, recorded at atUS (Unix microseconds) on line (its
// line number in the log, for the report).
func (r *Replayer) Check(atUS int64, line int, req *host.CheckRequest) {
	switch {
	case !r.started:
		r.first, r.now, r.started = atUS, atUS, true
	case atUS < r.now:
		r.outOfOrder++
		if step := r.now - atUS; step > r.stepBack {
			r.stepBack, r.stepBackLine = step, line
		}
	default:
		r.now = atUS
	}
	r.sim.CheckInto(r.now, req, &r.res)
	r.checks++
	if !r.res.Allowed {
		r.denied++
	}
	for i := range r.res.Results {
		rr := &r.res.Results[i]
		st := r.index[rr.Rule]
		st.matched++
		st.second.add(r.now)
		st.minute.add(r.now)
		if rr.Err != nil {
			st.errs++
		}
		if !rr.Allowed {
			st.denied++
			st.subjects[rr.Subject]++
			st.hours[r.now/time.Hour.Microseconds()]++
		}
	}
}

// Report is what a replay found. Its JSON form is `ruled replay --format
// json`'s output: add to it, never rename or remove.
type Report struct {
	// Checks is the number of requests replayed.
	Checks int64 `json:"checks"`
	// From and To are the times of the first and the last request
	// replayed; nil (JSON null) when none was.
	From *time.Time `json:"from"`
	To   *time.Time `json:"to"`
	// Denied counts the requests the rules would have denied.
	Denied int64 `json:"denied"`
	// OutOfOrder counts requests recorded before one replayed earlier,
	// replayed at the later time.
	OutOfOrder int64 `json:"out_of_order"`
	// MaxStepBack is the largest step back in time, in seconds: how much
	// earlier than the latest time before it a request was recorded; 0
	// when the requests are in time order. MaxStepBackLine is that
	// request's line (the first such, on a tie), 0 when none.
	MaxStepBack     float64      `json:"max_step_back_seconds"`
	MaxStepBackLine int          `json:"max_step_back_line"`
	Rules           []RuleReport `json:"rules"`
}

// RuleReport is what one rule decided in a replay.
type RuleReport struct {
	Rule   string `json:"rule"`
	Plugin string `json:"plugin"`
	Shadow bool   `json:"shadow"`
	// Matched counts the requests the rule applied to.
	Matched int64 `json:"matched"`
	// Denied counts its denials: requests it would refuse (a shadow
	// rule's are reported, never enforced).
	Denied int64 `json:"denied"`
	// Errors counts requests for which its expressions failed (decided by
	// its on_error).
	Errors int64 `json:"errors"`
	// PeakPerSecond is the most requests it matched in one second of
	// log time, the first such second starting at PeakSecond; likewise
	// per minute. The times are nil (JSON null) when it matched nothing.
	PeakPerSecond int64      `json:"peak_per_second"`
	PeakSecond    *time.Time `json:"peak_second"`
	PeakPerMinute int64      `json:"peak_per_minute"`
	PeakMinute    *time.Time `json:"peak_minute"`
	// TopSubjects are the subjects it denied most, most first.
	TopSubjects []SubjectCount `json:"top_subjects"`
	// TopHours are the hours (of log time, in UTC) with the most denials,
	// most first: where denials cluster.
	TopHours []HourCount `json:"top_hours"`
}

// SubjectCount is a subject and how often a rule denied it.
type SubjectCount struct {
	Subject string `json:"subject"`
	Denied  int64  `json:"denied"`
}

// HourCount is an hour and how many denials a rule made in it.
type HourCount struct {
	Hour   time.Time `json:"hour"`
	Denied int64     `json:"denied"`
}

// Report returns what the replay has found so far.
func (r *Replayer) Report() Report {
	rep := Report{Checks: r.checks, Denied: r.denied, OutOfOrder: r.outOfOrder,
		MaxStepBack: float64(r.stepBack) / 1e6, MaxStepBackLine: r.stepBackLine, Rules: []RuleReport{}}
	if r.started {
		rep.From, rep.To = utcMicro(r.first), utcMicro(r.now)
	}
	for _, st := range r.rules {
		rr := RuleReport{Rule: st.rule.Name, Plugin: st.rule.Plugin, Shadow: st.rule.Shadow,
			Matched: st.matched, Denied: st.denied, Errors: st.errs,
			PeakPerSecond: st.second.peakN, PeakPerMinute: st.minute.peakN,
			TopSubjects: []SubjectCount{}, TopHours: []HourCount{}}
		if st.matched > 0 {
			rr.PeakSecond = utcMicro(st.second.peak * st.second.period)
			rr.PeakMinute = utcMicro(st.minute.peak * st.minute.period)
		}
		if st.rule.Exempt {
			rr.Plugin = "exempt"
		}
		for s, n := range st.subjects {
			rr.TopSubjects = append(rr.TopSubjects, SubjectCount{Subject: s, Denied: n})
		}
		slices.SortFunc(rr.TopSubjects, func(a, b SubjectCount) int {
			return cmp.Or(cmp.Compare(b.Denied, a.Denied), cmp.Compare(a.Subject, b.Subject))
		})
		rr.TopSubjects = rr.TopSubjects[:min(len(rr.TopSubjects), r.top)]
		for h, n := range st.hours {
			rr.TopHours = append(rr.TopHours, HourCount{Hour: time.Unix(h*3600, 0).UTC(), Denied: n})
		}
		slices.SortFunc(rr.TopHours, func(a, b HourCount) int {
			return cmp.Or(cmp.Compare(b.Denied, a.Denied), a.Hour.Compare(b.Hour))
		})
		rr.TopHours = rr.TopHours[:min(len(rr.TopHours), r.top)]
		rep.Rules = append(rep.Rules, rr)
	}
	return rep
}

// utcMicro returns the time of us (Unix microseconds), in UTC.
func utcMicro(us int64) *time.Time {
	t := time.UnixMicro(us).UTC()
	return &t
}
