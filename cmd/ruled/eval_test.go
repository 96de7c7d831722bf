package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestEvalGolden")

// TestEvalGolden traces the cookbook rules for each input in
// testdata/eval and compares with the golden output next to it.
func TestEvalGolden(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/eval/*.json")
	if len(inputs) < 4 {
		t.Fatalf("found %d inputs", len(inputs))
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules/cookbook", "--input", in}, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			golden := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/ruled -run TestEvalGolden -update)", err)
			}
			if out.String() != string(want) {
				t.Fatalf("eval output differs from %s:\n%s", golden, out.String())
			}
		})
	}
}

func TestEvalBadInput(t *testing.T) {
	path := writeFile(t, t.TempDir(), "in.json", `{"request": {"ip": 7}}`)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"eval", "--rules", "../../examples/rules", "--input", path}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "not a /v1/check body") {
		t.Fatalf("stderr %q", errOut.String())
	}
}
