package jsonw

import (
	"encoding/json"
	"testing"
)

func FuzzAppendString(f *testing.F) {
	f.Add("plain")
	f.Add("\x00\"\\<>&\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Fatalf("%q: got %s, want %s", s, got, want)
		}
	})
}
