package accesslog

import (
	"maps"
	"net/url"
	"testing"
)

func TestQueryMatchesURL(t *testing.T) {
	for _, q := range []string{
		"",
		"a=1",
		"a=1&b=2&a=3",
		"a=1&&b=&c",
		"x=%20y+z&%41=%zz&ok=1",
		"a=1;b=2&c=3",
		"k+1=v%2B1&=empty&k%3D=v",
		"utf=%C3%A9&bad=%C3",
		"&&&",
	} {
		u := &url.URL{RawQuery: q}
		var want map[string]string
		for k, v := range u.Query() {
			if want == nil {
				want = map[string]string{}
			}
			want[k] = v[0]
		}
		e := &Entry{Query: q}
		if got := e.QueryMap(); !maps.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%q: got %v, want %v", q, got, want)
		}
	}
}
