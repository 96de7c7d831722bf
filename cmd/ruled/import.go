package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/ruled-dev/ruled/internal/envoyimport"
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
                       "files": [{"file", "source", "domain", "rules"}],
                       "errors": [{"file", "line", "col", "rule", "code", "message"}],
                       "notes": [{"file", "line", "col", "message"}]}
                    line and col are 1-based, 0 when unknown; rule is always ""; code is one of
                    read, yaml, unknown-field, duplicate-field, missing-field, bad-value,
                    duplicate-domain, duplicate-descriptor, untranslatable, exists, write

Exit status: 0 the files were written, 1 errors (nothing written), 2 usage error.
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
func importCmd(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, importUsage)
		return 2
	}
	switch args[0] {
	case "envoy":
		return importEnvoy(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, importUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "ruled import: unknown format %q (want envoy)\n\n%s", args[0], importUsage)
		return 2
	}
}

func importEnvoy(args []string, stdout, stderr io.Writer) int {
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
	rep := importReport{Path: path, Out: *out, Files: []importFile{}, Errors: []reportError{}, Notes: []reportNote{}}

	files, notes, errs := translateEnvoy(path)
	if len(errs) == 0 {
		if err := envoyimport.Write(*out, files, *force); err != nil {
			code := "write"
			if errors.Is(err, envoyimport.ErrExist) {
				code = "exists"
			}
			errs = append(errs, &envoyimport.Error{Code: code, Message: err.Error()})
		}
	}
	rep.OK = len(errs) == 0
	for _, e := range errs {
		rep.Errors = append(rep.Errors, reportError{File: e.Pos.File, Line: e.Pos.Line, Col: e.Pos.Column, Code: e.Code, Message: e.Message})
	}
	for _, n := range notes {
		rep.Notes = append(rep.Notes, reportNote{File: n.Pos.File, Line: n.Pos.Line, Col: n.Pos.Column, Message: n.Message})
	}
	if rep.OK {
		for _, f := range files {
			rep.Files = append(rep.Files, importFile{File: filepath.Join(*out, f.Name), Source: f.Source, Domain: f.Domain, Rules: f.Rules})
		}
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
		for _, e := range errs {
			fmt.Fprintln(stderr, e.Error())
		}
		if len(errs) > 0 {
			fmt.Fprintf(stderr, "%d error(s); nothing written\n", len(errs))
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
// returning every error at once: unreadable files and translation errors.
func translateEnvoy(path string) ([]envoyimport.File, []envoyimport.Note, envoyimport.ErrorList) {
	srcs, err := envoyimport.ReadSources(path)
	var errs envoyimport.ErrorList
	if err != nil && !errors.As(err, &errs) {
		return nil, nil, envoyimport.ErrorList{{Pos: envoyimport.Position{File: path}, Code: envoyimport.CodeRead, Message: err.Error()}}
	}
	files, notes, err := envoyimport.Translate(srcs)
	var more envoyimport.ErrorList
	if errors.As(err, &more) {
		errs = append(errs, more...)
	}
	if len(errs) > 0 {
		errs.Err() // sorts
		return nil, nil, errs
	}
	return files, notes, nil
}
