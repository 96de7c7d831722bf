package envoyimport

import (
	"errors"
	"fmt"
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
// error is of another type only when path itself cannot be read.
func ReadSources(path string) ([]Source, error) {
	names, err := yamlnode.Files(path)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no *.yaml or *.yml files", path)
	}
	var srcs []Source
	var errs ErrorList
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			errs = append(errs, &Error{Pos: Position{File: n}, Code: CodeRead, Message: err.Error()})
			continue
		}
		srcs = append(srcs, Source{Name: n, Content: b})
	}
	return srcs, errs.Err()
}

// ErrExist is the error of Write when a file it would write exists.
var ErrExist = errors.New("file exists")

// Write writes files into dir, creating it if need be. Unless force, it
// writes nothing when any of the files exists already (the error then
// wraps ErrExist and names them). Each file is written under a temporary
// dot name and renamed into place, so that a ruled serving dir never
// reads half a file.
func Write(dir string, files []File, force bool) error {
	if !force {
		var exist []string
		for _, f := range files {
			p := filepath.Join(dir, f.Name)
			if _, err := os.Lstat(p); err == nil {
				exist = append(exist, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if len(exist) > 0 {
			slices.Sort(exist)
			return fmt.Errorf("%w: %s (--force overwrites)", ErrExist, strings.Join(exist, ", "))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		tmp, err := os.CreateTemp(dir, "."+f.Name+".*")
		if err != nil {
			return err
		}
		_, werr := tmp.Write(f.Content)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
		if err := os.Rename(tmp.Name(), filepath.Join(dir, f.Name)); err != nil {
			_ = os.Remove(tmp.Name())
			return err
		}
	}
	return nil
}
