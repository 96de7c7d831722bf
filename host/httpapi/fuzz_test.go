package httpapi

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"

	"github.com/ruled-dev/ruled/host"
)

// checkBodySeeds are bodies that reach the corners of decoding a check body:
// the seeds of FuzzCheckBody.
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

// FuzzCheckBody holds every body API to a 200 or a 400, and a body /v1/check
// accepts to the request it describes: encoded again, it decodes to the same.
func FuzzCheckBody(f *testing.F) {
	for _, seed := range checkBodySeeds {
		f.Add(seed)
	}
	srv := New(Options{Checker: &recorder{answer: host.Result{Allowed: true}}})
	f.Fuzz(func(t *testing.T, body string) {
		sameAfterRoundTrip(t, body)
		for _, path := range []string{"/v1/check", "/v1/check/batch", "/v1/acquire"} {
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
			if rec.Code != http.StatusOK && rec.Code != http.StatusBadRequest {
				t.Fatalf("%s %q: status %d", path, body, rec.Code)
			}
		}
	})
}

func FuzzAuthHeaders(f *testing.F) {
	f.Add("/login?a=1", "POST", "203.0.113.7", "198.51.100.1, 127.0.0.1", "api.example.com")
	f.Add("%zz", "", "not-an-ip", ",,,", "")
	f.Add("http://x/y", "GET", "::ffff:1.2.3.4", "[::1]", "h")
	rec := &recorder{answer: host.Result{Allowed: true}}
	srv := New(Options{Checker: rec})
	f.Fuzz(func(t *testing.T, uri, method, realIP, xff, fwdHost string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/auth", nil)
		req.RemoteAddr = "127.0.0.1:1234"
		for k, v := range map[string]string{"X-Original-URI": uri, "X-Original-Method": method, "X-Real-IP": realIP,
			"X-Forwarded-For": xff, "X-Forwarded-Host": fwdHost} {
			if strings.ContainsAny(v, "\r\n") {
				return // not a header value a proxy can send
			}
			req.Header.Set(k, v)
		}
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("status %d", w.Code)
		}
		rec.mu.Lock()
		got := rec.got[len(rec.got)-1]
		rec.mu.Unlock()
		if _, err := netip.ParseAddr(got.Request.IP); err != nil {
			t.Fatalf("client IP %q is not an address (X-Real-IP %q, XFF %q)", got.Request.IP, realIP, xff)
		}
	})
}

// sameAfterRoundTrip checks that a body decodeCheck accepts means what it
// says: the request it decodes to, written as a body and decoded again, is
// the same request.
func sameAfterRoundTrip(t *testing.T, body string) {
	t.Helper()
	decode := func(body string) (*host.CheckRequest, *Error) {
		rec := httptest.NewRecorder()
		return decodeCheck(rec, httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(body)))
	}
	req, e := decode(body)
	if e != nil {
		if e.Status != http.StatusBadRequest || e.Code == "" || e.Message == "" {
			t.Fatalf("%q: error %+v, want a 400 with a code and a message", body, e)
		}
		return
	}
	again, err := json.Marshal(checkBody{
		Request: requestBody{IP: req.Request.IP, Method: req.Request.Method, Path: req.Request.Path, Host: req.Request.Host,
			User: req.Request.User, Headers: req.Request.Headers, Query: req.Request.Query},
		Attrs: req.Attrs, Hits: &req.Hits, DedupID: req.DedupID, BestEffort: req.BestEffort}, json.FormatNilMapAsNull(true))
	if err != nil {
		t.Fatalf("%q: %v", body, err)
	}
	req2, e := decode(string(again))
	if e != nil || !reflect.DeepEqual(req, req2) {
		t.Fatalf("%q decodes to %+v; written as %s it decodes to %+v (%v)", body, req, again, req2, e)
	}
}

// decodeCheck reads and validates a check body as /v1/check does (a zero
// Server allows refunds). Every failure is a 400 with a code and a message
// that names the problem.
func decodeCheck(w http.ResponseWriter, r *http.Request) (*host.CheckRequest, *Error) {
	var b checkBody
	if e := decodeJSON(w, r, &b); e != nil {
		return nil, e
	}
	return (&Server{}).checkRequest(r, &b)
}
