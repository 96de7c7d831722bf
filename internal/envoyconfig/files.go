package envoyconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ruled-dev/ruled/internal/yamlnode"
)

// ReadSources reads the envoy ratelimit config files that path stands
// for: path itself when it is a file, else the directory's *.yaml and
// *.yml files (not its subdirectories, not dot files) in name order.
// Files that cannot be read are errors of the returned ErrorList; the
// error is of another type only when path itself cannot be read. A
// directory without config files gives none, and no error: envoy
// ratelimit serves no limits from it.
func ReadSources(path string) ([]Source, error) {
	names, err := yamlnode.Files(path)
	if err != nil {
		return nil, err
	}
	var srcs []Source
	var errs ErrorList
	for _, n := range names {
		b, err := yamlnode.ReadFile(n)
		if err != nil {
			errs = append(errs, &Error{Pos: Position{File: n}, Code: CodeRead, Message: err.Error()})
			continue
		}
		srcs = append(srcs, Source{Name: n, Content: b})
	}
	return srcs, errs.Err()
}

// Write writes files into dir, creating it if need be, and returns the
// paths of the files it put in place, in the order of files. Its error is
// an *Error: with code CodeExist when, unless force, any of the files
// exists already (nothing is written then, and the message names them),
// else with code CodeWrite.
//
// Every file is first written under a temporary dot name, and only when
// all of them are are they renamed into place, so that a ruled serving dir
// never reads half a file and a failure to write one leaves none. Only a
// failing rename can leave some of the files in place: those returned.
func Write(dir string, files []File, force bool) (written []string, err error) {
	if !force {
		var exist []string
		for _, f := range files {
			p := filepath.Join(dir, f.Name)
			if _, err := os.Lstat(p); err == nil {
				exist = append(exist, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, writeError(err)
			}
		}
		if len(exist) > 0 {
			slices.Sort(exist)
			return nil, &Error{Code: CodeExist, Message: "file exists: " + strings.Join(exist, ", ")}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, writeError(err)
	}
	tmps := make([]string, 0, len(files))
	defer func() {
		// The temporary files not renamed into place (all of them but
		// the written ones, which come first).
		for _, t := range tmps[len(written):] {
			_ = os.Remove(t)
		}
	}()
	for _, f := range files {
		tmp, err := os.CreateTemp(dir, "."+f.Name+".*")
		if err != nil {
			return nil, writeError(err)
		}
		tmps = append(tmps, tmp.Name())
		_, werr := tmp.Write(f.Content)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
			return nil, writeError(err)
		}
	}
	for i, f := range files {
		p := filepath.Join(dir, f.Name)
		if err := os.Rename(tmps[i], p); err != nil {
			return written, writeError(err)
		}
		written = append(written, p)
	}
	return written, nil
}

// writeError is the error of Write for err.
func writeError(err error) error { return &Error{Code: CodeWrite, Message: err.Error()} }
