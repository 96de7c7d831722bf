package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// newFlagSet returns a flag set whose errors and help go to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("ruled "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// envName is the environment variable that sets a flag: RULED_ and the
// flag's name in upper case with '-' as '_'.
func envName(flagName string) string {
	return "RULED_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// envNamer is a flag value that reads another environment variable than
// envName's.
type envNamer interface{ EnvName() string }

// stringEnv is a string flag read from the environment variable env.
type stringEnv struct {
	v   string
	env string
}

func (s *stringEnv) String() string     { return s.v }
func (s *stringEnv) Set(v string) error { s.v = v; return nil }
func (s *stringEnv) EnvName() string    { return s.env }

// parseWithEnv sets every flag not given on the command line from its
// environment variable (envName's, or the value's own: envNamer), then
// parses the command line.
func parseWithEnv(fs *flag.FlagSet, args []string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if n, ok := f.Value.(envNamer); ok {
			name = n.EnvName()
		}
		f.Usage += fmt.Sprintf(" (env %s)", name)
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	if err != nil {
		return err
	}
	return fs.Parse(args)
}
