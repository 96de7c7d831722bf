package httpapi

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host"
)

// checkBodySeeds are bodies that reach the corners of decoding a check body:
// the seeds of FuzzCheckBody and of TestDecodeCheckMatchesEncodingJSON.
var checkBodySeeds = []string{
	`{}`, `{"request": {"ip": "1.2.3.4", "headers": {"X-A": "b"}}, "hits": 3}`, `{"hits": -1, "dedup_id": "x"}`,
	`{"hits": 1e30}`, `[`, `{"request": null}`, `{"attrs": {"a": 1}}`, "\x00", `{"checks": []}`, ``, ` `, `null`,
	`{"request":{"ip":"203.0.113.7","method":"POST","path":"/login","host":"h","user":"u","headers":{"X-Tier":"pro"},"query":{"q":"1"}},"attrs":{"tenant":"acme"},"hits":0,"dedup_id":"abc","best_effort":true}`,
	// types
	`{"request":{"headers":{"a":1}}}`, `{"request":{"headers":{"a":{}}}}`, `{"request":{"headers":{"a":[1]}}}`,
	`{"hits":true}`, `{"hits":"1"}`, `{"hits":1e3}`, `{"hits":1.0}`, `{"hits":99999999999999999999}`, `{"hits":-0}`,
	`{"hits":9223372036854775807}`, `{"hits":-9223372036854775808}`, `{"hits":-9223372036854775809}`, `{"hits":5000000000}`,
	`{"request":5}`, `[1]`, `"x"`, `5`, `true`, `5x`, `{"best_effort":1}`, `{"best_effort":"true"}`, `{"dedup_id":true}`,
	`{"attrs":[]}`, `{"attrs":"s"}`, `{"request":[]}`, `{"request":{"ip":{"a":1}}}`, `{"hits":[1,2]}`, `{"hits":{}}`,
	// names, duplicates and null
	`{"HITS":2}`, `{"hitſ":2}`, `{"Request":{"İP":"x","ıp":"y"}}`, `{"h\u0069ts":2}`, "{\"a\xff\":1}", `{"k\u212Aey":1}`,
	`{"attrs":{"a":"x","a":null}}`, `{"request":{"ip":"a"},"request":null}`, `{"request":{"ip":"a"},"request":{"path":"/"}}`,
	`{"attrs":{"a":"1"},"attrs":{"b":"2"}}`, `{"attrs":{"a":"1"},"attrs":null}`, `{"hits":5,"hits":null}`, `{"hits":null}`,
	`{"dedup_id":"a","dedup_id":null}`, `{"best_effort":true,"best_effort":null}`, `{"request":{"headers":null}}`,
	`{"request":{"headers":{"X-A":"1","x-b":"2"}}}`,
	// which error wins
	`{"request":{"foo":1}}`, `{"hist":1,"hits":"x"}`, `{"hits":"x","hist":1}`, `{"hits":"x","hist":1 `, `{"hist":1,`,
	`{"hist":1}x`, `{"hits":5000000000,"dedup_id":"` + strings.Repeat("x", 300) + `"}`, `{"hist":1,"a":tru}`,
	// trailing data
	`{} x`, `{} {}`, `{}}`, `{} "x`, `{} "x"`, `{} 5`, `{} nul`, `{} ]`, "{}\n\t ",
	// strings
	`{"attrs":{"\u00e9":"\ud800"}}`, "{\"attrs\":{\"a\":\"\xff\xfe\xed\xa0\x80\"}}", `{"dedup_id":"\ud83d\ude00\ud800\u0041\udc00x"}`,
	`{"dedup_id":"\"\\\/\b\f\n\r\t\u0000"}`, "{\"dedup_id\":\"a\x01\"}", `{"dedup_id":"\x"}`, `{"dedup_id":"\u12"}`,
	`{"dedup_id":"\u12G4"}`, `{"dedup_id":"é<>&` + "\u2028" + `"}`, `{"\ud83d\ude00":1}`,
	// syntax
	`{"hits":01}`, `{"hits":-}`, `{"hits":1.}`, `{"hits":1e}`, `{"hits":1e+}`, `{"hits":-01}`, `{"a":tru}`, `{"a":nul}`,
	`{"a":fals}`, `{"hits":5x}`, `{"hits":1.5`, `{,}`, `{"a" 1}`, `{"attrs":{"a":"b",}}`, `[1,]`, `[1 2]`, `{"a":[1 2]}`,
	`  {"request"  :  {  }  }  `, `{'a':1}`, "\ufeff{}", `{"a":1,"b"}`, `{"a":}`, `{"a"`, `{"a":"`, `{"a":"\`, `{"a":"\u`,
	`{"a":[`, `{"a":[]`, `-`, `tru`, `{"hits":-`, `{"hits":1e`,
}

// referenceCheck decodes a check body as /v1/check did with encoding/json:
// decodeJSON, then toRequest. It returns the header map as decoded too.
func referenceCheck(body io.Reader) (*host.CheckRequest, map[string]string, *Error) {
	var b checkBody
	r := httptest.NewRequest(http.MethodPost, "/v1/check", body)
	if e := decodeJSON(httptest.NewRecorder(), r, &b); e != nil {
		return nil, nil, e
	}
	req, e := b.toRequest()
	return req, b.Request.Headers, e
}

// sameAsEncodingJSON fails t unless decodeCheck and referenceCheck agree on
// the body: the same request, or the same error.
func sameAsEncodingJSON(t *testing.T, body string) {
	t.Helper()
	sameAsEncodingJSONFrom(t, body, func() io.Reader { return strings.NewReader(body) })
}

func sameAsEncodingJSONFrom(t *testing.T, name string, body func() io.Reader) {
	t.Helper()
	want, rawHeaders, wantErr := referenceCheck(body())
	got, gotErr := decodeCheck(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/v1/check", body()))
	if len(name) > 200 {
		name = name[:200] + "..."
	}
	switch {
	case wantErr != nil || gotErr != nil:
		if wantErr == nil || gotErr == nil || *wantErr != *gotErr {
			t.Fatalf("%q:\ngot      %+v, %+v\nwant     %+v, %+v", name, got, gotErr, want, wantErr)
		}
	case len(host.NormalizeHeaders(rawHeaders)) < len(rawHeaders):
		// Header names that differ only in case: which value NormalizeHeaders
		// keeps is chance, so compare the rest.
		g, w := *got, *want
		g.Request.Headers, w.Request.Headers = nil, nil
		if !reflect.DeepEqual(g, w) || len(got.Request.Headers) != len(want.Request.Headers) {
			t.Fatalf("%q:\ngot  %+v\nwant %+v", name, got, want)
		}
	case !reflect.DeepEqual(got, want):
		t.Fatalf("%q:\ngot  %+v\nwant %+v", name, got, want)
	}
}

func TestDecodeCheckMatchesEncodingJSON(t *testing.T) {
	for _, body := range checkBodySeeds {
		sameAsEncodingJSON(t, body)
	}
	// Nesting at encoding/json's limit and past it.
	sameAsEncodingJSON(t, `{"x":`+strings.Repeat("[", maxDepth-1)+strings.Repeat("]", maxDepth-1)+`}`)
	sameAsEncodingJSON(t, `{"x":`+strings.Repeat("[", maxDepth)+strings.Repeat("]", maxDepth)+`}`)
	sameAsEncodingJSON(t, strings.Repeat(`{"a":`, maxDepth+1))

	// Bodies around the size limit: where encoding/json would have read past
	// it, body_too_large; where it stops before, what it found.
	pad := func(n int) string { return strings.Repeat(" ", n) }
	for _, body := range []string{
		`{"attrs": {"a": "` + strings.Repeat("x", 10<<20) + `"}}`,
		`{"attrs": {"a": "` + strings.Repeat("x", MaxBodyBytes-20) + `"}}`,
		`{"attrs": {"a": "` + strings.Repeat("x", MaxBodyBytes-19) + `"}}`,
		`{"attrs": {"a": "` + strings.Repeat("x", MaxBodyBytes-18) + `"}}`,
		`{}` + pad(MaxBodyBytes),
		`{}` + pad(MaxBodyBytes-2),
		`{}` + pad(MaxBodyBytes-10) + `"abc"`,
		`{}` + pad(MaxBodyBytes-10) + `"abcdefgh"`,
		`{}` + pad(MaxBodyBytes-10) + `12345678`,
		`{}` + pad(MaxBodyBytes-10) + `123456789`,
		`{}` + pad(MaxBodyBytes-10) + `[` + pad(20),
		`{} "` + strings.Repeat("x", 2<<20),
		`x` + pad(2<<20),
		pad(2 << 20),
		`{"hist":1` + pad(2<<20),
		`{"hist":1}` + pad(2<<20),
		`[1]` + pad(2<<20),
		`5` + pad(2<<20),
		`"` + strings.Repeat("x", MaxBodyBytes-2) + `"`,
		`"` + strings.Repeat("x", MaxBodyBytes-2) + `" `,
		strings.Repeat("1", MaxBodyBytes) + " ",
		`{"a":` + strings.Repeat("1", MaxBodyBytes),
	} {
		sameAsEncodingJSON(t, body)
	}

	// A body whose reading fails.
	for _, prefix := range []string{"", "  ", `{"request":{"ip":"1.2.3.4"}}`, `{"request":{"ip":"1.2`, `{} `, `{} "x`, `{"hist":1`, `x`} {
		sameAsEncodingJSONFrom(t, prefix+" then a failed read", func() io.Reader {
			return io.MultiReader(strings.NewReader(prefix), failingReader{})
		})
	}
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }
