package envoyconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/ruled-dev/ruled/internal/testkit/xdstest"
)

// TestFromXDSTranslatesAsTheFile: every golden envoy config that an xDS
// resource can carry translates to the same rules from the resource as
// from the file.
func TestFromXDSTranslatesAsTheFile(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "translate", "*", "envoy", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, path := range paths {
		content, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := xdstest.ParseYAML(content)
		if err != nil {
			continue // a field a resource cannot carry, or a case of a YAML error
		}
		res.Name = filepath.Base(path)
		fromFile, _, ferr := Translate([]Source{{Name: "xds:" + res.Name, Content: content}}, Options{})
		fromXDS, _, xerr := Translate([]Source{FromXDS(res)}, Options{})
		if (ferr == nil) != (xerr == nil) {
			t.Fatalf("%s: file error %v, xDS error %v", path, ferr, xerr)
		}
		if len(fromFile) != len(fromXDS) {
			t.Fatalf("%s: %d files from the file, %d from the resource", path, len(fromFile), len(fromXDS))
		}
		for i := range fromFile {
			if stripComments(fromFile[i].Content) != stripComments(fromXDS[i].Content) {
				t.Errorf("%s: the rules differ\n--- file\n%s\n--- xDS (%s)\n%s", path, fromFile[i].Content, FromXDS(res).Content, fromXDS[i].Content)
			}
		}
		compared++
	}
	t.Logf("%d of %d golden configs compared", compared, len(paths))
	if compared < 8 {
		t.Fatalf("only %d of %d golden configs could be sent as xDS resources", compared, len(paths))
	}
}

// stripComments drops the comment lines of a generated rule file: they
// name positions, and remark on what a file leaves out (a resource cannot
// leave out requests_per_unit).
func stripComments(b []byte) string {
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestFromXDSErrors: a resource envoy ratelimit refuses is refused, with
// the resource named and the reason.
func TestFromXDSErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  *rlsconf.RateLimitConfig
		want string
	}{
		{"no domain", &rlsconf.RateLimitConfig{Name: "a"}, "xds:a:1:1: no domain"},
		{"no unit", &rlsconf.RateLimitConfig{Name: "b", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 5}}}}, "rate_limit has no unit"},
		{"duplicate", &rlsconf.RateLimitConfig{Name: "c", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", Value: "v"}, {Key: "k", Value: "v"}}}, "duplicate descriptor"},
		{"unlimited with unit", &rlsconf.RateLimitConfig{Name: "e", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: rlsconf.RateLimitUnit_SECOND}}}}, "an unlimited rate limit has no unit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Translate([]Source{FromXDS(tc.res)}, Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one with %q", err, tc.want)
			}
		})
	}
}

// TestMergeDomains: MERGE_DOMAIN_CONFIG's merge, and its refusal of a
// descriptor configured twice; without it a second config of a domain is
// an error.
func TestMergeDomains(t *testing.T) {
	a := Source{Name: "a.yaml", Content: []byte("domain: d\ndescriptors:\n  - {key: k, value: one, rate_limit: {unit: second, requests_per_unit: 1}}\n")}
	b := Source{Name: "b.yaml", Content: []byte("domain: d\ndescriptors:\n  - {key: k, value: two, rate_limit: {unit: second, requests_per_unit: 2}}\n")}
	if _, _, err := Translate([]Source{a, b}, Options{}); err == nil || !strings.Contains(err.Error(), `b.yaml:1:9: domain "d" is also configured in a.yaml:1:9`) {
		t.Fatalf("without merging: %v", err)
	}
	files, _, err := Translate([]Source{a, b}, Options{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Rules != 3 {
		t.Fatalf("merged into %d files, the first with %d rules; want 1 file of 3 rules (override, one, two)", len(files), files[0].Rules)
	}
	for _, want := range []string{`attrs["k"] == "one"`, `attrs["k"] == "two"`, "limit: 1,", "limit: 2,"} {
		if !strings.Contains(string(files[0].Content), want) {
			t.Errorf("the merged rules lack %s:\n%s", want, files[0].Content)
		}
	}
	_, _, err = Translate([]Source{a, a}, Options{MergeDomains: true})
	if err == nil || !strings.Contains(err.Error(), `a.yaml:3:11: descriptor`) || !strings.Contains(err.Error(), "is also configured in a.yaml:3:11") {
		t.Fatalf("a descriptor merged twice: %v", err)
	}
}
