package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host"
)

type countersReply struct {
	Rule     string `json:"rule"`
	Counters []struct {
		Subject   string `json:"subject"`
		Used      int64  `json:"used"`
		Limit     int64  `json:"limit"`
		Remaining int64  `json:"remaining"`
		ResetMS   int64  `json:"reset_ms"`
		Limited   bool   `json:"limited"`
		Error     string `json:"error"`
	} `json:"counters"`
	NextCursor *string `json:"next_cursor"`
}

func (f *fixture) counters(t *testing.T, query string) countersReply {
	t.Helper()
	resp, body := f.do(t, "GET", "/v1/admin/counters?"+query, "t", "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET counters?%s: %d %s", query, resp.StatusCode, body)
	}
	var r countersReply
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.NextCursor == nil || r.Counters == nil {
		t.Fatalf("GET counters?%s: %v\n%s", query, err, body)
	}
	return r
}

// TestAdminCountersListsPagesAndClears lists a rule's subjects over HTTP
// in pages, follows next_cursor to the end, then clears the rule.
func TestAdminCountersListsPagesAndClears(t *testing.T) {
	f := newFixture(t, "t")
	ctx := context.Background()
	const subjects = 150
	for i := range subjects {
		for range i%4 + 1 { // 1 to 4 hits; per-ip allows 3
			f.engine.Check(ctx, &host.CheckRequest{Request: host.Request{IP: fmt.Sprintf("10.1.0.%d", i)}, Hits: 1})
		}
	}
	seen := map[string]int64{}
	cursor, pages := "", 0
	for {
		r := f.counters(t, "rule=per-ip&limit=40&cursor="+url.QueryEscape(cursor))
		pages++
		if r.Rule != "per-ip" {
			t.Fatalf("rule %q", r.Rule)
		}
		for i, c := range r.Counters {
			if c.Limit != 3 || c.Used+c.Remaining != 3 || c.ResetMS <= 0 || c.Error != "" || c.Limited != (c.Remaining == 0) {
				t.Fatalf("counter %+v", c)
			}
			if i > 0 && c.Used > r.Counters[i-1].Used {
				t.Fatalf("page %d not sorted by use: %+v after %+v", pages, c, r.Counters[i-1])
			}
			seen[c.Subject] = c.Used
		}
		if *r.NextCursor == "" {
			break
		}
		cursor = *r.NextCursor
	}
	if len(seen) != subjects || pages < 2 {
		t.Fatalf("%d subjects in %d pages, want %d in 2 or more", len(seen), pages, subjects)
	}
	for i := range subjects {
		if u := seen[fmt.Sprintf("10.1.0.%d", i)]; u != int64(min(i%4+1, 3)) {
			t.Fatalf("10.1.0.%d used %d", i, u)
		}
	}
	// The default page holds the most used subjects first.
	if r := f.counters(t, "rule=per-ip"); len(r.Counters) == 0 || !r.Counters[0].Limited || r.Counters[0].Used != 3 {
		t.Fatalf("default page: %+v", r.Counters[:min(3, len(r.Counters))])
	}

	resp, body := f.do(t, "DELETE", "/v1/admin/counters?rule=per-ip", "t", "", nil)
	var cleared struct {
		Rule    string `json:"rule"`
		Deleted int64  `json:"deleted"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(body), &cleared) != nil || cleared.Rule != "per-ip" || cleared.Deleted != subjects {
		t.Fatalf("DELETE: %d %s, want %d keys deleted", resp.StatusCode, body, subjects)
	}
	if r := f.counters(t, "rule=per-ip&limit=1000"); len(r.Counters) != 0 || *r.NextCursor != "" {
		t.Fatalf("after clearing: %+v", r)
	}
	// per-path never matched (the checks had no path): it lists nothing.
	if r := f.counters(t, "rule=per-path"); len(r.Counters) != 0 {
		t.Fatalf("per-path: %+v", r)
	}
}

// TestAdminCountersRefusals: bad parameters get 400 with a reason, an
// unknown rule 404, and the endpoints need the token.
func TestAdminCountersRefusals(t *testing.T) {
	f := newFixture(t, "t")
	for _, c := range []struct {
		method, query string
		want          int
		reason        string
	}{
		{"GET", "", 400, "rule: required"},
		{"GET", "rule=", 400, "rule: required"},
		{"GET", "rule=per-ip&limit=0", 400, "limit: want an integer from 1 to 1000"},
		{"GET", "rule=per-ip&limit=1001", 400, "limit: want an integer from 1 to 1000"},
		{"GET", "rule=per-ip&limit=ten", 400, "limit: want an integer"},
		{"GET", "rule=per-ip&cursor=nope", 400, "cursor: not a next_cursor"},
		{"GET", "rule=per-ip&rule=per-path", 400, "rule: given 2 times"},
		{"GET", "rule=per-ip&subject=x", 400, "unknown query parameter subject"},
		{"GET", "rule=per-ip&limit=%zz", 400, "query:"},
		{"GET", "rule=no-such-rule", 404, "no rule"},
		{"DELETE", "", 400, "rule: required"},
		{"DELETE", "rule=per-ip&cursor=x", 400, "unknown query parameter cursor"},
		{"DELETE", "rule=no-such-rule", 404, "no rule"},
	} {
		resp, body := f.do(t, c.method, "/v1/admin/counters?"+c.query, "t", "", nil)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if resp.StatusCode != c.want || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error.Message, c.reason) {
			t.Errorf("%s ?%s: %d %s, want %d with %q", c.method, c.query, resp.StatusCode, body, c.want, c.reason)
		}
	}
	for _, method := range []string{"GET", "DELETE"} {
		for _, token := range []string{"", "wrong"} {
			if resp, _ := f.do(t, method, "/v1/admin/counters?rule=per-ip", token, "", nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d, want 401", method, token, resp.StatusCode)
			}
		}
	}
}

// TestAdminCountersWithoutToken: on loopback without a token the listing
// is read-only like the other status endpoints; clearing does not exist.
func TestAdminCountersWithoutToken(t *testing.T) {
	f, _ := newObservedServer(t, "", true)
	port := f.srv.URL[strings.LastIndexByte(f.srv.URL, ':'):]
	if code, _, body := get(t, f.srv.URL+"/v1/admin/counters?rule=per-ip", "localhost"+port, ""); code != http.StatusOK {
		t.Fatalf("GET on loopback: %d %s", code, body)
	}
	if code, _, _ := get(t, f.srv.URL+"/v1/admin/counters?rule=per-ip", "evil.example"+port, ""); code != http.StatusForbidden {
		t.Fatalf("GET with a foreign Host: %d, want 403", code)
	}
	if resp, _ := f.do(t, "DELETE", "/v1/admin/counters?rule=per-ip", "", "", nil); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE without a token: %d", resp.StatusCode)
	}

	off, _ := newObservedServer(t, "", false)
	if code, _, _ := get(t, off.srv.URL+"/v1/admin/counters?rule=per-ip", "", ""); code != http.StatusNotFound {
		t.Fatalf("GET with the admin endpoints off: %d, want 404", code)
	}
}
