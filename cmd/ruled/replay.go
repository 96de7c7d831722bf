package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/offline/accesslog"
	"github.com/ruled-dev/ruled/internal/offline/replay"
	"github.com/ruled-dev/ruled/rules"
)

const replayUsage = `Usage: ruled replay --rules PATH --log FILE [flags]

Replays an access log through the rules, in the log's time, on the plugins' reference
models (no Redis), and reports per rule what it would have done: requests matched,
would deny, the peak rate, the subjects most often denied and the hours where denials
cluster (docs/rules.md, "Replaying an access log").

  --rules PATH       rule file or directory of *.yaml (required; env RULED_RULES)
  --log FILE         the access log; - for standard input; gzip is read as such
                     (required; env RULED_LOG)
  --log-type TYPE    auto (the default: json when the first line starts with {, else
                     combined), combined (nginx/Apache), common, or json (one object a
                     line) (env RULED_LOG_TYPE)
  --field NAME=KEYS  the JSON keys of a field, first present wins, e.g.
                     --field ip=client_ip,remote_addr; repeatable; fields: time, ip,
                     method, uri, query, host, user, status, bytes, referer,
                     user_agent, request, proto (env RULED_FIELD: one spec)
  --map TARGET=EXPR  sets a target of the check body from the line, replacing its
                     default; TARGET is ip, method, path, host, user, headers.NAME,
                     query.NAME or attrs.NAME; EXPR an expression over ip, method, uri,
                     path, host, user, proto, referer, user_agent, request, query,
                     status, bytes, time and fields (a JSON line's object); repeatable
                     (env RULED_MAP: one spec)
  --top N            subjects and hours listed per rule (default 10; env RULED_TOP)
  --format FORMAT    text (the default) or json: one object (env RULED_FORMAT)
                       {"lines", "bad_lines", "bad_examples": [{"line", "reason"}],
                        "read_error", "checks", "from", "to", "denied", "out_of_order",
                        "max_step_back_seconds", "max_step_back_line",
                        "rules": [{"rule", "plugin", "shadow", "matched", "denied",
                                   "errors", "peak_per_second", "peak_second",
                                   "peak_per_minute", "peak_minute",
                                   "top_subjects": [{"subject", "denied"}],
                                   "top_hours": [{"hour", "denied"}]}]}
                     lines counts every line read, blank ones included; checks the
                     requests replayed; times are RFC 3339, or null when there is none

By default a line gives the check body {ip, method, path, host, user, query, and the
user-agent and referer headers}, hits 1. A line that does not parse, or whose --map
expression fails, is skipped and counted; the first few are listed.

Exit status: 0 the log was replayed; 1 the rule files do not load, a rule uses a
Wasm or process plugin (no local model), the log is empty or none of its lines was
replayed, or reading it failed part way (a truncated gzip: the report covers the lines
before); 2 usage error, a bad --field or --map, or a log that cannot be opened.
`

// maxBadExamples is how many skipped lines a replay lists.
const maxBadExamples = 5

// stepBackWarning is the step back in time above which the text report
// warns that the log is out of order.
const stepBackWarning = time.Minute

// replayOutput is the output of ruled replay --format json. Its fields are
// a stable interface: add to it, never rename or remove.
type replayOutput struct {
	// Lines counts every line read, blank ones included: the number of
	// the last. Lines = Checks + BadLines + the blank lines.
	Lines int `json:"lines"`
	// BadLines counts the lines skipped: they did not parse, or a --map
	// expression failed on them.
	BadLines    int          `json:"bad_lines"`
	BadExamples []badExample `json:"bad_examples"`
	// ReadError is why reading stopped before the end of the log (a
	// truncated gzip, a signal); "" when the whole log was read.
	ReadError string `json:"read_error"`
	replay.Report
}

// badExample is a skipped line and why.
type badExample struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// specList is a repeatable flag.
type specList []string

func (l *specList) String() string     { return strings.Join(*l, " ") }
func (l *specList) Set(s string) error { *l = append(*l, s); return nil }

// replayCmd is ruled replay, --log - reading the process's standard input.
func replayCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return replayMain(ctx, args, os.Stdin, stdout, stderr)
}

// replayMain is ruled replay, reading --log - from stdin.
func replayMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlagSet("replay", stderr)
	rulesPath := fs.String("rules", "", "rule file or directory of *.yaml (required)")
	logPath := fs.String("log", "", "the access log; - for standard input (required)")
	logType := fs.String("log-type", "auto", "auto, combined, common or json")
	var fields, maps specList
	fs.Var(&fields, "field", "NAME=KEYS: the JSON keys of a field (repeatable)")
	fs.Var(&maps, "map", "TARGET=EXPR: sets a target of the check body (repeatable)")
	top := fs.Int("top", replay.DefaultTop, "subjects and hours listed per rule")
	format := formatText
	fs.Var(&format, "format", "output format: text or json")
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage) }
	if err := parseWithEnv(fs, args); err != nil {
		return 2
	}
	usageErr := func(err error) int { fmt.Fprintf(stderr, "ruled replay: %v\n", err); return 2 }
	var problem string
	switch {
	case *rulesPath == "":
		problem = "--rules is required"
	case *logPath == "":
		problem = "--log is required"
	case fs.NArg() > 0:
		problem = fmt.Sprintf("unexpected argument %q (the log is given with --log)", fs.Arg(0))
	case *top < 1:
		problem = fmt.Sprintf("--top must be at least 1, got %d", *top)
	}
	if problem != "" {
		fmt.Fprintf(stderr, "ruled replay: %s\n\n", problem)
		fs.Usage()
		return 2
	}
	opts := accesslog.Options{JSON: accesslog.DefaultJSONFields()}
	var err error
	if opts.Format, err = accesslog.ParseFormat(*logType); err != nil {
		return usageErr(fmt.Errorf("--log-type: %w", err))
	}
	for _, f := range fields {
		if err := opts.JSON.Set(f); err != nil {
			return usageErr(fmt.Errorf("--field: %w", err))
		}
	}
	mapper, err := accesslog.NewMapper(maps)
	if err != nil {
		return usageErr(fmt.Errorf("--map: %w", err))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	set, _, err := checkRules(ctx, *rulesPath, log, false)
	if err != nil {
		printRuleErrors(stderr, err, "")
		return 1
	}
	rp, err := replay.New(set, replay.Options{Top: *top})
	if err != nil {
		fmt.Fprintf(stderr, "ruled replay: %v\n", err)
		return 1
	}
	in, err := accesslog.Open(*logPath, stdin)
	if err != nil {
		return usageErr(err)
	}
	defer in.Close()
	out, err := replayLog(ctx, in, opts, mapper, rp)
	if err != nil {
		return usageErr(fmt.Errorf("--field: %w", err)) // only JSON fields can be wrong
	}
	if format == formatJSON {
		err = writeJSON(stdout, out)
	} else {
		err = writeReplay(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ruled replay: %v\n", err)
		return 1
	}
	if msg := replayFailure(out); msg != "" {
		name := *logPath
		if name == "-" {
			name = "standard input"
		}
		fmt.Fprintf(stderr, "ruled replay: %s: %s\n", name, msg)
		return 1
	}
	return 0
}

// replayFailure returns why a replay that ran is not a pass, or "": the
// log could not be read to its end, is empty, or gave no request.
func replayFailure(out replayOutput) string {
	switch {
	case out.ReadError != "":
		return fmt.Sprintf("%s; only the %d lines before it were replayed", out.ReadError, out.Lines)
	case out.Lines == 0:
		return "the log is empty"
	case out.Checks > 0:
		return ""
	case out.BadLines == 0:
		return fmt.Sprintf("no request replayed: the log's %d lines are blank", out.Lines)
	}
	x := out.BadExamples[0]
	return fmt.Sprintf("no request replayed: all %d non-blank lines were skipped (line %d: %s); "+
		"check --log-type, --field and --map", out.BadLines, x.Line, x.Reason)
}

// replayLog replays every line of in and returns the report. It stops at
// the first error reading in, or when ctx ends, reporting the lines before
// it (ReadError); it fails only on opts.
func replayLog(ctx context.Context, in io.Reader, opts accesslog.Options, m *accesslog.Mapper, rp *replay.Replayer) (replayOutput, error) {
	out := replayOutput{BadExamples: []badExample{}}
	r, err := accesslog.NewReader(in, opts)
	if err != nil {
		return out, err
	}
	var e accesslog.Entry
	var input rules.Input
	req := host.CheckRequest{Hits: 1}
	for {
		if r.Line()%4096 == 0 && ctx.Err() != nil {
			out.ReadError = context.Cause(ctx).Error()
			break
		}
		err := r.Read(&e)
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil {
			err = m.Map(&e, &input)
		}
		if err == nil {
			req.Request, req.Attrs = input.Request, input.Attrs
			rp.Check(e.Time.UnixMicro(), e.Line, &req)
			continue
		}
		var le *accesslog.LineError
		if !errors.As(err, &le) {
			out.ReadError = err.Error()
			break
		}
		out.BadLines++
		if len(out.BadExamples) < maxBadExamples {
			out.BadExamples = append(out.BadExamples, badExample{Line: le.Line, Reason: le.Message()})
		}
	}
	out.Lines = r.Line()
	out.Report = rp.Report()
	return out, nil
}

// writeReplay writes the report for people.
func writeReplay(w io.Writer, out replayOutput) error {
	var b strings.Builder
	fmt.Fprintf(&b, "replayed %d requests (of %d lines", out.Checks, out.Lines)
	var left []string
	if out.BadLines > 0 {
		left = append(left, fmt.Sprintf("%d skipped", out.BadLines))
	}
	if blank := int64(out.Lines-out.BadLines) - out.Checks; blank > 0 {
		left = append(left, fmt.Sprintf("%d blank", blank))
	}
	if len(left) > 0 {
		b.WriteString("; " + strings.Join(left, ", "))
	}
	b.WriteString(")")
	if out.From != nil {
		fmt.Fprintf(&b, " from %s to %s (%s)", out.From.Format(timeLayout), out.To.Format(timeLayout), out.To.Sub(*out.From))
	}
	fmt.Fprintf(&b, ": %d denied%s", out.Denied, percent(out.Denied, out.Checks))
	if out.OutOfOrder > 0 {
		fmt.Fprintf(&b, "; %d out of time order, replayed at the latest time before them", out.OutOfOrder)
	}
	b.WriteString("\n")
	if step := time.Duration(out.MaxStepBack * float64(time.Second)).Round(time.Millisecond); step > stepBackWarning {
		fmt.Fprintf(&b, "warning: line %d goes back %s in time (logs concatenated out of order?): the requests "+
			"logged before the latest time were replayed at it, crowded together, which overstates denials; "+
			"sort the log by time, or replay each file separately\n", out.MaxStepBackLine, step)
	}
	for _, x := range out.BadExamples {
		fmt.Fprintf(&b, "  skipped line %d: %s\n", x.Line, x.Reason)
	}
	for _, r := range out.Rules {
		kind := r.Plugin
		if r.Shadow {
			kind += ", shadow"
		}
		fmt.Fprintf(&b, "\nrule %s (%s): matched %d%s, would deny %d%s", r.Rule, kind, r.Matched, percent(r.Matched, out.Checks),
			r.Denied, percent(r.Denied, r.Matched))
		if r.Errors > 0 {
			fmt.Fprintf(&b, ", expressions failed %d", r.Errors)
		}
		b.WriteString("\n")
		if r.Matched == 0 {
			continue
		}
		fmt.Fprintf(&b, "  peak %d/s at %s, %d/min at %s\n", r.PeakPerSecond, r.PeakSecond.Format(timeLayout),
			r.PeakPerMinute, r.PeakMinute.Format(timeLayout))
		if len(r.TopSubjects) > 0 {
			b.WriteString("  most denied:")
			for i, s := range r.TopSubjects {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %q %d", s.Subject, s.Denied)
			}
			b.WriteString("\n")
		}
		if len(r.TopHours) > 0 {
			b.WriteString("  denials by hour (UTC), most first:")
			for i, h := range r.TopHours {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %s %d%s", h.Hour.Format("2006-01-02T15Z"), h.Denied, percent(h.Denied, r.Denied))
			}
			b.WriteString("\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	return nil
}

// timeLayout is RFC 3339 without a fraction: reports are in UTC.
const timeLayout = "2006-01-02T15:04:05Z07:00"

// percent formats n as a share of total, " (12.3%)", or "" when total is 0.
func percent(n, total int64) string {
	if total == 0 {
		return ""
	}
	return fmt.Sprintf(" (%.1f%%)", 100*float64(n)/float64(total))
}
