package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/ruled-dev/ruled/rules"
)

// evalInput is the body of a /v1/check request, as `ruled eval` reads it.
type evalInput struct {
	Request    rules.Request     `json:"request"`
	Attrs      map[string]string `json:"attrs"`
	Hits       *int64            `json:"hits"`
	DedupID    string            `json:"dedup_id"`
	BestEffort bool              `json:"best_effort"`
}

// evalRule is one rule's line in the trace.
type evalRule struct {
	Rule    string `json:"rule"`
	File    string `json:"file"`
	Line    int    `json:"line"`
	Plugin  string `json:"plugin"`
	Matched bool   `json:"matched"`
	Skipped bool   `json:"skipped,omitempty"`
	// ReplacedBy names the matching rule that replaces this one.
	ReplacedBy string         `json:"replaced_by,omitempty"`
	Exempt     bool           `json:"exempt,omitempty"`
	Subject    string         `json:"subject,omitempty"`
	Config     map[string]any `json:"config,omitempty"`
	Shadow     bool           `json:"shadow,omitempty"`
	Stop       bool           `json:"stop,omitempty"`
	OnError    string         `json:"on_error"`
	Error      string         `json:"error,omitempty"`
}

// evalOutput is the output of ruled eval --format json: the trace. Its
// fields are a stable interface: add to it, never rename or remove.
type evalOutput struct {
	Hits  int64      `json:"hits"`
	Rules []evalRule `json:"rules"`
	// Applied names the rules a check would send to their plugins, in order.
	Applied []string `json:"applied"`
}

const evalUsage = `Usage: ruled eval --rules PATH --input FILE.json [--format text|json]

Shows which rules match a check, with their subjects, plugins and resolved config, without Redis.

  --rules PATH      rule file or directory of *.yaml (required; env RULED_RULES)
  --input FILE      JSON file holding a /v1/check body; - for standard input (required; env RULED_INPUT)
  --format FORMAT   text (the default): one line a rule, then the rules applied; json: the trace
                    as one JSON object (env RULED_FORMAT):
                      {"hits": number,
                       "rules": [{"rule", "file", "line", "plugin", "matched", "skipped",
                                  "replaced_by", "exempt", "subject", "config", "shadow", "stop",
                                  "on_error", "error"}],
                       "applied": [rule names]}
                    in rule order; file is relative to PATH; skipped, replaced_by, exempt,
                    subject, config, shadow, stop and error are left out when false or empty.
                    When the rule files do not load, the output is ruled check --format json's
                    instead.

Exit status: 0 every rule evaluated; 1 the rule files do not load; 2 usage error or an
input that is not a /v1/check body; 3 a rule failed to evaluate for this input (its error
is in the trace, which is printed all the same).
`

// Exit codes of ruled eval.
const (
	evalOK       = 0
	evalBadRules = 1
	evalBadUsage = 2
	evalRuleErr  = 3
)

// evalCmd traces which rules match a check body, their subjects, plugins and
// resolved config, without touching Redis.
func evalCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("eval", stderr)
	rulesPath := fs.String("rules", "", "rule file or directory of *.yaml (required)")
	inputPath := fs.String("input", "", "JSON file holding a /v1/check body; - for standard input (required)")
	format := formatText
	fs.Var(&format, "format", "output format: text or json")
	fs.Usage = func() { fmt.Fprint(stderr, evalUsage) }
	if err := parseWithEnv(fs, args); err != nil {
		return evalBadUsage
	}
	if *rulesPath == "" || *inputPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return evalBadUsage
	}
	in, err := readEvalInput(*inputPath)
	if err != nil {
		fmt.Fprintf(stderr, "ruled eval: %v\n", err)
		return evalBadUsage
	}
	set, err := rulesLoad(*rulesPath)
	if err != nil {
		if format == formatJSON {
			if werr := writeJSON(stdout, newCheckReport(*rulesPath, nil, nil, err)); werr != nil {
				fmt.Fprintf(stderr, "ruled eval: %v\n", werr)
			}
		} else {
			printRuleErrors(stderr, err, "")
		}
		return evalBadRules
	}
	out := trace(set, *rulesPath, in)
	if ctx.Err() != nil {
		return evalBadUsage // main gives the signal's status; no output
	}
	if format == formatJSON {
		err = writeJSON(stdout, out)
	} else {
		err = writeTrace(stdout, out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "ruled eval: %v\n", err)
		return evalBadRules
	}
	for _, r := range out.Rules {
		if r.Error != "" {
			return evalRuleErr
		}
	}
	return evalOK
}

// trace evaluates set, loaded from rulesPath, for in.
func trace(set *rules.Set, rulesPath string, in *evalInput) evalOutput {
	base := rulesPath
	if fi, err := os.Stat(base); err == nil && !fi.IsDir() {
		base = filepath.Dir(base)
	}
	out := evalOutput{Hits: 1, Rules: []evalRule{}, Applied: []string{}}
	if in.Hits != nil {
		out.Hits = *in.Hits
	}
	for _, t := range set.Trace(&rules.Input{Request: in.Request, Attrs: in.Attrs}) {
		r := t.Rule
		file := r.Pos.File
		if rel, err := filepath.Rel(base, file); err == nil {
			file = rel
		}
		er := evalRule{Rule: r.Name, File: file, Line: r.Pos.Line, Plugin: r.Plugin, Matched: t.Matched, Skipped: t.Skipped,
			ReplacedBy: t.ReplacedBy, Exempt: r.Exempt, Subject: t.Subject, Config: t.Config, Shadow: r.Shadow, Stop: r.Stop, OnError: string(r.OnError)}
		if t.Err != nil {
			er.Error = t.Err.Error()
		}
		if t.Matched && t.Err == nil && t.ReplacedBy == "" {
			out.Applied = append(out.Applied, r.Name)
		}
		out.Rules = append(out.Rules, er)
	}
	return out
}

// writeTrace writes the trace for people: one line a rule, then the rules
// applied.
func writeTrace(w io.Writer, out evalOutput) error {
	var b strings.Builder
	for _, r := range out.Rules {
		plugin := r.Plugin
		if r.Exempt {
			plugin = "exempt"
		}
		fmt.Fprintf(&b, "%s:%d: %s (%s): ", r.File, r.Line, r.Rule, plugin)
		switch {
		case r.Skipped:
			b.WriteString("skipped (an earlier rule stopped evaluation)")
		case r.Error != "":
			fmt.Fprintf(&b, "error, on_error %s: %s", r.OnError, r.Error)
		case !r.Matched:
			b.WriteString("no match")
		case r.ReplacedBy != "":
			fmt.Fprintf(&b, "match, replaced by %s (does not apply)", r.ReplacedBy)
		case r.Exempt:
			b.WriteString("match, exempt (admitted; later rules are not evaluated)")
		default:
			fmt.Fprintf(&b, "match, subject %q", r.Subject)
			if len(r.Config) > 0 {
				cfg, err := json.Marshal(r.Config)
				if err != nil {
					return fmt.Errorf("rule %s: config: %w", r.Rule, err)
				}
				fmt.Fprintf(&b, ", config %s", cfg)
			}
		}
		if r.Shadow {
			b.WriteString(" [shadow]")
		}
		if r.Stop {
			b.WriteString(" [stop]")
		}
		b.WriteByte('\n')
	}
	applied := "none"
	if len(out.Applied) > 0 {
		applied = strings.Join(out.Applied, ", ")
	}
	fmt.Fprintf(&b, "applied (hits %d): %s\n", out.Hits, applied)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("writing the output: %w", err)
	}
	return nil
}

func readEvalInput(path string) (*evalInput, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("reading the input: %w", err)
		}
		defer f.Close()
		r = f
	}
	var in evalInput
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("%s: not a /v1/check body: %w", path, err)
	}
	return &in, nil
}
