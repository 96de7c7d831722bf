package suggest

import "testing"

func TestClosest(t *testing.T) {
	known := []string{"window", "limit", "offset"}
	for in, want := range map[string]string{"windw": "window", "limt": "limit", "ofset": "offset", "burst": "", "": ""} {
		if got := Closest(in, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "abc", 3}, {"subjet", "subject", 1}, {"rulez", "rules", 1}, {"limt", "limit", 1}, {"abc", "abc", 0}} {
		if got := distance(tc.a, tc.b); got != tc.d {
			t.Errorf("distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
	}
}
