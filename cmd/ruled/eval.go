package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"

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
	Rule    string         `json:"rule"`
	File    string         `json:"file"`
	Line    int            `json:"line"`
	Plugin  string         `json:"plugin"`
	Matched bool           `json:"matched"`
	Skipped bool           `json:"skipped,omitempty"`
	Subject string         `json:"subject,omitempty"`
	Config  map[string]any `json:"config,omitempty"`
	Shadow  bool           `json:"shadow,omitempty"`
	Stop    bool           `json:"stop,omitempty"`
	OnError string         `json:"on_error"`
	Error   string         `json:"error,omitempty"`
}

type evalOutput struct {
	Hits  int64      `json:"hits"`
	Rules []evalRule `json:"rules"`
	// Applied names the rules a check would send to their plugins, in order.
	Applied []string `json:"applied"`
}

// evalCmd traces which rules match a check body, their subjects, plugins and
// resolved config, without touching Redis.
func evalCmd(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("eval", stderr)
	rulesPath := fs.String("rules", "", "rule file or directory of *.yaml (required)")
	inputPath := fs.String("input", "", "JSON file holding a /v1/check body; - for standard input (required)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ruled eval --rules PATH --input FILE.json\n\nShows which rules match a check, with their subjects, plugins and resolved config, without Redis.")
		fs.PrintDefaults()
	}
	if err := parseWithEnv(fs, args); err != nil {
		return 2
	}
	if *rulesPath == "" || *inputPath == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	in, err := readEvalInput(*inputPath)
	if err != nil {
		fmt.Fprintf(stderr, "ruled eval: %v\n", err)
		return 2
	}
	set, err := rulesLoad(*rulesPath)
	if err != nil {
		printRuleErrors(stderr, err)
		return 1
	}
	base := *rulesPath
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
			Subject: t.Subject, Config: t.Config, Shadow: r.Shadow, Stop: r.Stop, OnError: string(r.OnError)}
		if t.Err != nil {
			er.Error = t.Err.Error()
		}
		if t.Matched && t.Err == nil {
			out.Applied = append(out.Applied, r.Name)
		}
		out.Rules = append(out.Rules, er)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(stderr, "ruled eval: %v\n", err)
		return 1
	}
	return 0
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
