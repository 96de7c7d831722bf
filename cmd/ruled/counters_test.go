package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// TestAdminCountersThroughTheDaemon lists a rule's counters through
// ruled serve (its managed Redis, its admin token), clears them, and lists
// them again: none are left, and the subjects start afresh.
func TestAdminCountersThroughTheDaemon(t *testing.T) {
	d := spawnDaemon(t, `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 3, window: 1h}
`, "--admin-token", "tok")
	const subjects = 12
	for i := range subjects {
		ip := fmt.Sprintf("198.51.100.%d", i)
		for range i%4 + 1 {
			d.check("/", ip)
		}
	}
	admin := func(method, query, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, d.base+"/v1/admin/counters?"+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	type page struct {
		Rule     string `json:"rule"`
		Counters []struct {
			Subject string `json:"subject"`
			Used    int64  `json:"used"`
			Limit   int64  `json:"limit"`
			Limited bool   `json:"limited"`
		} `json:"counters"`
		NextCursor string `json:"next_cursor"`
	}
	list := func() page {
		t.Helper()
		code, body := admin("GET", "rule=per-ip", "tok")
		var p page
		if code != http.StatusOK || json.Unmarshal(body, &p) != nil || p.Rule != "per-ip" || p.NextCursor != "" {
			t.Fatalf("GET /v1/admin/counters: %d %s", code, body)
		}
		return p
	}

	p := list()
	if len(p.Counters) != subjects {
		t.Fatalf("%d subjects listed, want %d: %+v", len(p.Counters), subjects, p.Counters)
	}
	for i, c := range p.Counters {
		var n int
		if _, err := fmt.Sscanf(c.Subject, "198.51.100.%d", &n); err != nil || c.Limit != 3 || c.Used != int64(min(n%4+1, 3)) {
			t.Fatalf("counter %+v", c)
		}
		if i > 0 && c.Used > p.Counters[i-1].Used {
			t.Fatalf("not the most used first: %+v", p.Counters)
		}
	}
	if code, _ := admin("DELETE", "rule=per-ip", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("DELETE with a wrong token: %d", code)
	}
	code, body := admin("DELETE", "rule=per-ip", "tok")
	var cleared struct {
		Deleted int64 `json:"deleted"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &cleared) != nil || cleared.Deleted != subjects {
		t.Fatalf("DELETE /v1/admin/counters: %d %s, want %d keys deleted", code, body, subjects)
	}
	if p := list(); len(p.Counters) != 0 {
		t.Fatalf("after clearing: %+v", p.Counters)
	}
	if v := d.check("/", "198.51.100.3"); v.status != http.StatusOK {
		t.Fatalf("a subject at its limit before clearing: %d after", v.status)
	}
}
