package main

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// Runs against ruled are tested with the real binary in
// cmd/ruled/clientlease_test.go; these are the command line's errors.
func TestBadCommandLines(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease", "maybe"}, "--lease: want on or off"},
		{[]string{"--rule-request", `{"request": {"ip": 1}}`}, "--rule-request"},
		{[]string{"--rule-request", `{"requests": {}}`}, "unknown field"},
		{[]string{"--goroutines", "0"}, "must be above 0"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	} {
		_, err := parse(tc.args, io.Discard)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
	c, err := parse([]string{"--rule-request", `{"request": {"ip": "192.0.2.1", "path": "/a"}, "attrs": {"t": "x"}}`, "--lease", "off"}, io.Discard)
	if err != nil || c.lease || c.req.Request.IP != "192.0.2.1" || c.req.Request.Path != "/a" || c.req.Attrs["t"] != "x" {
		t.Fatalf("parse: %+v %v", c, err)
	}
}
