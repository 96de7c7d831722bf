package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseAB(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ruled")
	if err := os.WriteFile(bin, nil, 0o700); err != nil {
		t.Fatal(err)
	}
	ts, err := parseAB("old=" + bin + ", new=" + bin)
	if err != nil || len(ts) != 2 || ts[0] != (abTarget{"old", bin}) || ts[1].label != "new" {
		t.Fatalf("parseAB: %v, %v", ts, err)
	}
	for in, want := range map[string]string{
		"old=" + bin:                         "at least two",
		"old=" + bin + ",old=" + bin:         `label "old" twice`,
		"old=" + bin + ",new":                "want LABEL=BINARY",
		"old=" + bin + ",new=/no/such/ruled": "new: stat /no/such/ruled",
	} {
		if _, err := parseAB(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseAB(%q): %v, want an error with %q", in, err, want)
		}
	}
}
