package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/rules"
)

const importUsage = `Usage: ruled import envoy PATH -o DIR [--force] [--format text|json]

Translates envoyproxy/ratelimit config files into rule files that decide the same for ruled's
Envoy rate limit service (ruled serve --rules DIR --grpc-listen ADDR): one file per domain,
DIR/DOMAIN.yaml. PATH is a config file or a directory of *.yaml and *.yml files. Every problem
is reported at once with its position, and nothing is written unless every file translates.
docs/rules.md, "Importing Envoy ratelimit configs", says how and where ruled and envoy differ.

  -o DIR            directory to write the rule files to, created if need be (required; env RULED_O)
  --force           overwrite files of the same names in DIR (env RULED_FORCE)
  --format FORMAT   text (the default): notes and "wrote ..." on stdout, one error a line on
                    stderr; json: one JSON object on stdout, errors or not (env RULED_FORMAT):
                      {"ok": bool, "path": string, "out": string,
                       "files": [{"file", "source", "domain", "rules"}] (the files written),
                       "errors": [{"file", "line", "col", "rule", "code", "message"}],
                       "notes": [{"file", "line", "col", "message"}]}
                    line and col are 1-based, 0 when unknown; rule is always ""; code is one of
                    read, yaml, unknown-field, duplicate-field, missing-field, bad-value,
                    duplicate-domain, duplicate-descriptor, untranslatable, exists, write

Exit status: 0 the files were written, 1 errors (nothing written, unless renaming the files into
place failed part way: then the output says which were), 2 usage error.
`

// importReport is the output of ruled import envoy --format json. Its
// fields are a stable interface: add to it, never rename or remove.
type importReport struct {
	OK     bool          `json:"ok"`
	Path   string        `json:"path"`
	Out    string        `json:"out"`
	Files  []importFile  `json:"files"`
	Errors []reportError `json:"errors"`
	Notes  []reportNote  `json:"notes"`
}

// importFile is one rule file written by ruled import envoy.
type importFile struct {
	File   string `json:"file"`
	Source string `json:"source"`
	Domain string `json:"domain"`
	Rules  int    `json:"rules"`
}

// importCmd runs `ruled import SOURCE ...`; envoy is the only source.
func importCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	switch args[0] {
	case "envoy":
		return importEnvoy(ctx, args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, importUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "ruled import: unknown format %q (want envoy)\n\n%s", args[0], importUsage)
		return 2
	}
}

func importEnvoy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("import envoy", stderr)
	out := fs.String("o", "", "directory to write the rule files to")
	force := fs.Bool("force", false, "overwrite existing files")
	format := formatText
	fs.Var(&format, "format", "output format: text or json")
	fs.Usage = func() { fmt.Fprint(stderr, importUsage) }
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 || *out == "" {
		fmt.Fprintln(stderr, "ruled import envoy: want one PATH and -o DIR")
		fs.Usage()
		return 2
	}
	path := pos[0]

	files, notes, err := translateEnvoy(path)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "ruled import envoy: %s before any file was written\n", context.Cause(ctx))
		return 2 // main gives the signal's status
	}
	var written []string
	if err == nil {
		written, err = writeEnvoy(*out, files, *force)
	}
	rep := importReport{OK: err == nil, Path: path, Out: *out, Files: []importFile{}, Errors: reportErrors(err), Notes: reportNotes(notes)}
	for i, p := range written { // the first files, in order
		f := files[i]
		rep.Files = append(rep.Files, importFile{File: p, Source: f.Source, Domain: f.Domain, Rules: f.Rules})
	}

	if format == formatJSON {
		if err := writeJSON(stdout, rep); err != nil {
			fmt.Fprintf(stderr, "ruled import envoy: %v\n", err)
			return 1
		}
	} else {
		for _, n := range notes {
			fmt.Fprintln(stdout, n)
		}
		if err != nil {
			outcome := "nothing written"
			if len(written) > 0 {
				outcome = fmt.Sprintf("only %d of %d files written: %s", len(written), len(files), strings.Join(written, ", "))
			}
			printRuleErrors(stderr, err, outcome)
		}
		for _, f := range rep.Files {
			fmt.Fprintf(stdout, "wrote %s: %d rules for domain %q (from %s)\n", f.File, f.Rules, f.Domain, f.Source)
		}
		if rep.OK {
			fmt.Fprintf(stdout, "serve them with: ruled serve --rules %s --grpc-listen 127.0.0.1:8081\n", *out)
		}
	}
	if !rep.OK {
		return 1
	}
	return 0
}

// translateEnvoy reads and translates the envoy config files at path,
// returning every error at once, as a rules.ErrorList: unreadable files
// and translation errors.
func translateEnvoy(path string) ([]envoyconfig.File, []envoyconfig.Note, error) {
	srcs, rerr := envoyconfig.ReadSources(path)
	if rerr == nil && len(srcs) == 0 {
		return nil, nil, fmt.Errorf("%s: no *.yaml or *.yml files", path) // nothing to import is a mistake
	}
	files, notes, terr := envoyconfig.Translate(srcs, envoyconfig.Options{})
	var more envoyconfig.ErrorList
	errors.As(terr, &more)
	if err := rules.Merge(rerr, more); err != nil {
		return nil, nil, err
	}
	return files, notes, nil
}

// writeEnvoy writes the translated files into dir (envoyconfig.Write) and
// returns the paths of those it put in place, and its error as a
// rules.ErrorList.
func writeEnvoy(dir string, files []envoyconfig.File, force bool) ([]string, error) {
	written, err := envoyconfig.Write(dir, files, force)
	if err == nil {
		return written, nil
	}
	var e *envoyconfig.Error
	if !errors.As(err, &e) {
		e = &envoyconfig.Error{Code: envoyconfig.CodeWrite, Message: err.Error()}
	}
	if e.Code == envoyconfig.CodeExist {
		e.Message += " (--force overwrites)"
	}
	return written, envoyconfig.ErrorList{e}
}
