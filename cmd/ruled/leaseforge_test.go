package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// forgeRules is one small window per client IP that leases to clients.
const forgeRules = `rules:
  - name: window
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 10, window: 1h}
    lease: 10
`

// postJSON posts body to the daemon and returns the status and the body.
func (d *daemon) postJSON(path, body string, header ...string) (int, string) {
	d.t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.base+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// takeLease takes a lease of permits for ip and returns its lease string.
func (d *daemon) takeLease(ip string, permits int) (int64, string) {
	d.t.Helper()
	code, text := d.postJSON("/v1/lease", fmt.Sprintf(`{"request": {"ip": %q}, "permits": %d}`, ip, permits))
	var a struct {
		Permits int64  `json:"permits"`
		Lease   string `json:"lease"`
	}
	if err := json.Unmarshal([]byte(text), &a); err != nil || code != http.StatusOK {
		d.t.Fatalf("lease: %d %s", code, text)
	}
	return a.Permits, a.Lease
}

// returnLease returns unused permits of lease for ip.
func (d *daemon) returnLease(ip, lease string, unused int64) (int, string) {
	d.t.Helper()
	return d.postJSON("/v1/lease/return", fmt.Sprintf(`{"returns": [{"request": {"ip": %q}, "lease": %q, "unused": %d}]}`, ip, lease, unused))
}

// admitted counts the checks for ip admitted of n.
func (d *daemon) admitted(ip string, n int) int {
	d.t.Helper()
	ok := 0
	for range n {
		if code, _ := d.postJSON("/v1/check", fmt.Sprintf(`{"request": {"ip": %q}}`, ip)); code == http.StatusOK {
			ok++
		}
	}
	return ok
}

// ticket is a lease string's contents, as the API encodes them.
type ticket struct {
	I string `json:"i"`
	D int64  `json:"d"`
	P int64  `json:"p"`
	H []hold `json:"h"`
}

type hold struct {
	Rule, Subject string
	Taken         int64
}

// encodeTicket is t's lease string with mac over it, or with a MAC under
// key when key is set, or unsigned (as before leases were signed) when
// neither is.
func encodeTicket(t *testing.T, tk ticket, key []byte, mac string) string {
	t.Helper()
	data, err := json.Marshal(tk)
	if err != nil {
		t.Fatal(err)
	}
	if key != nil {
		m := hmac.New(sha256.New, key)
		m.Write([]byte("ruled lease v1\x00"))
		m.Write(data)
		mac = base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	}
	if mac == "" {
		return base64.RawURLEncoding.EncodeToString(data)
	}
	return base64.RawURLEncoding.EncodeToString(data) + "." + mac
}

// decodeTicket splits a lease string into its contents and its MAC.
func decodeTicket(t *testing.T, s string) (ticket, string) {
	t.Helper()
	body, mac, _ := strings.Cut(s, ".")
	data, err := base64.RawURLEncoding.DecodeString(body)
	var tk ticket
	if err == nil {
		err = json.Unmarshal(data, &tk)
	}
	if err != nil {
		t.Fatalf("lease string %q: %v", s, err)
	}
	return tk, mac
}

// Issue 37, attack 1: a lease's numbers raised and returned as unused.
// The return is refused (403 lease_forged) and admission stays within the
// limit: the lease's 10 and no check after it.
func TestForgedLeaseReturnIsRefused(t *testing.T) {
	d := spawnDaemon(t, forgeRules)
	d.waitReady(15 * time.Second)
	const ip, limit = "192.0.2.1", 10
	permits, lease := d.takeLease(ip, limit)
	if permits != limit {
		t.Fatalf("lease of %d permits, want %d", permits, limit)
	}
	tk, mac := decodeTicket(t, lease)
	tk.P = 35
	for i := range tk.H {
		tk.H[i].Taken = 35
	}
	code, text := d.returnLease(ip, encodeTicket(t, tk, nil, mac), 35)
	if code != http.StatusForbidden || !strings.Contains(text, "lease_forged") {
		t.Errorf("raised lease returned: %d %s, want 403 lease_forged", code, text)
	}
	if n := d.admitted(ip, 40); int(permits)+n > limit {
		t.Fatalf("admitted %d leased + %d checked in one window of limit %d", permits, n, limit)
	}
}

// The lease string is the fleet's: a lease from one instance is returned
// to another on the same Redis, and what the client did not use goes back.
func TestLeaseReturnedToAnotherInstance(t *testing.T) {
	rs := redistest.Start(t)
	a := spawnDaemon(t, forgeRules, "--redis", rs.URL())
	b := spawnDaemon(t, forgeRules, "--redis", rs.URL())
	a.waitReady(15 * time.Second)
	b.waitReady(15 * time.Second)
	// The take and both returns must fit in the lease's life (its deadline
	// less the late margin); a try that a loaded machine made too slow is
	// answered late and redone on a fresh subject.
	for try := range leaseTries {
		ip := fmt.Sprintf("192.0.2.%d", 20+try)
		permits, lease := a.takeLease(ip, 10)
		if permits != 10 {
			t.Fatalf("lease of %d permits, want 10", permits)
		}
		code, text := b.returnLease(ip, lease, 6)
		if lateAnswer(t, code, text) {
			t.Logf("try %d: the return came too late: %s", try+1, text)
			continue
		}
		if code != http.StatusOK || !strings.Contains(text, `"returned":6`) {
			t.Fatalf("return to the other instance: %d %s, want 6 returned", code, text)
		}
		// Returned again, to the instance that gave it: the fleet credited it
		// already.
		code, text = a.returnLease(ip, lease, 10)
		if lateAnswer(t, code, text) {
			t.Logf("try %d: the second return came too late: %s", try+1, text)
			continue
		}
		if code != http.StatusOK || !strings.Contains(text, `"returned":0`) || !strings.Contains(text, "returned before") {
			t.Errorf("the same lease again, to the first instance: %d %s, want nothing returned", code, text)
		}
		if n := b.admitted(ip, 10); n != 6 {
			t.Fatalf("admitted %d after 6 of 10 leased came back, want 6", n)
		}
		return
	}
	t.Fatalf("every one of %d tries came too close to the lease's deadline", leaseTries)
}

// leaseTries is how many times a test whose calls must fit in one
// lease's life tries, each time on a fresh subject, when a loaded machine
// makes a try too slow.
const leaseTries = 3

// lateAnswer reports whether a lease return's answer counts a return as
// late (too close to its lease's deadline: nothing given back).
func lateAnswer(t *testing.T, code int, text string) bool {
	t.Helper()
	var a struct {
		Late int `json:"late"`
	}
	if code != http.StatusOK {
		return false
	}
	if err := json.Unmarshal([]byte(text), &a); err != nil {
		t.Fatalf("lease return answer %q: %v", text, err)
	}
	return a.Late > 0
}

// A lease returned twice is credited once: a client cannot buy quota by
// replaying a genuine return. The lease takes the whole window's 10 and
// none is used: its return gives them back, the client uses them with
// checks, then replays the return. Before (a replay credited again, the
// window counter refunded to 0): 20 admitted in a window of 10.
func TestLeaseReturnedTwiceCreditsOnce(t *testing.T) {
	d := spawnDaemon(t, forgeRules)
	d.waitReady(15 * time.Second)
	const limit = 10
	// The replay must come within the lease's life, the checks before it
	// included; a try that a loaded machine made too slow is answered late
	// and redone on a fresh subject.
	for try := range leaseTries {
		ip := fmt.Sprintf("192.0.2.%d", 50+try)
		permits, lease := d.takeLease(ip, limit)
		if permits != limit {
			t.Fatalf("lease of %d permits, want %d", permits, limit)
		}
		code, first := d.returnLease(ip, lease, permits)
		if lateAnswer(t, code, first) {
			t.Logf("try %d: the return came too late: %s", try+1, first)
			continue
		}
		if code != http.StatusOK || !strings.Contains(first, `"returned":10`) {
			t.Fatalf("return: %d %s, want 10 returned", code, first)
		}
		before := d.admitted(ip, limit)
		code, replay := d.returnLease(ip, lease, permits)
		after := d.admitted(ip, 3*limit)
		t.Logf("returned %s; %d admitted; replayed %s; %d admitted", strings.TrimSpace(first), before, strings.TrimSpace(replay), after)
		if before+after > limit {
			t.Fatalf("admitted %d + %d in one window of limit %d: the replayed return (%d %s) was credited", before, after, limit, code, replay)
		}
		if lateAnswer(t, code, replay) {
			t.Logf("try %d: the replay came too late to be checked for a credit", try+1)
			continue
		}
		if code != http.StatusOK || !strings.Contains(replay, `"returned":0`) || !strings.Contains(replay, "returned before") {
			t.Fatalf("replayed return: %d %s, want 200, nothing returned, the return listed in errors", code, replay)
		}
		return
	}
	t.Fatalf("every one of %d tries came too close to the lease's deadline", leaseTries)
}

// The documented bounds of a return call, against the binary: a body over
// 1 MiB is 400 body_too_large, over 1000 returns is 400 invalid_field;
// neither gives anything back.
func TestLeaseReturnOverTheLimitsIsRefused(t *testing.T) {
	d := spawnDaemon(t, forgeRules)
	d.waitReady(15 * time.Second)
	const ip = "192.0.2.6"
	permits, lease := d.takeLease(ip, 10)
	if permits != 10 {
		t.Fatalf("lease of %d permits, want 10", permits)
	}
	one := fmt.Sprintf(`{"request": {"ip": %q}, "lease": %q, "unused": 10}`, ip, lease)
	many := strings.Repeat(one+",", 1000) + one
	for _, tc := range []struct {
		name, body, code string
	}{
		{"a body over 1 MiB", `{"returns": [` + one + `], "pad": "` + strings.Repeat("x", 1<<20) + `"}`, "body_too_large"},
		{"1001 returns", `{"returns": [` + many + `]}`, "invalid_field"},
	} {
		status, text := d.postJSON("/v1/lease/return", tc.body)
		if status != http.StatusBadRequest || !strings.Contains(text, `"`+tc.code+`"`) {
			t.Errorf("%s: %d %.300s, want 400 %s", tc.name, status, text, tc.code)
		}
	}
	if n := d.admitted(ip, 10); n != 0 {
		t.Fatalf("admitted %d after the lease took the limit, want 0: a refused return gave units back", n)
	}
}

// Issue 37, attack 2: forged late returns naming random rules. Each is
// refused, and /metrics gains no series for a rule that is not loaded.
func TestForgedReturnsMakeNoMetricSeries(t *testing.T) {
	d := spawnDaemon(t, forgeRules)
	d.waitReady(15 * time.Second)
	past := time.Now().Add(-time.Minute).UnixMicro() // late: no Redis call, only the metric
	refused := 0
	for i := range 300 {
		tk := ticket{D: past, P: 10, H: []hold{{Rule: fmt.Sprintf("forged-%d", i), Subject: "x", Taken: 10}}}
		if code, _ := d.returnLease("192.0.2.3", encodeTicket(t, tk, nil, ""), 10); code == http.StatusForbidden {
			refused++
		}
	}
	_, body := httpGet(t, d.base+"/metrics")
	series := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "ruled_client_lease_units_total{") && !strings.Contains(l, `rule="window"`) {
			series++
		}
	}
	if series > 0 || refused != 300 {
		t.Fatalf("300 forged returns: %d refused, %d lease metric series of rules not loaded, want 300 and 0", refused, series)
	}
}

// redisCalls is the number of commands Redis has run, from INFO
// commandstats.
func redisCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, l := range strings.Split(info, "\n") {
		_, rest, ok := strings.Cut(l, ":calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("commandstats line %q: %v", l, err)
		}
		n += c
	}
	return n
}

// Issue 37, attack 3: one return of 14,000 holds. Forged, it is refused
// before any refund; signed with the fleet's key (as only someone with
// Redis access could), it is refused as over the bound. Either way Redis
// runs a handful of commands (the daemon's heartbeat and probes go on
// meanwhile), not one per hold.
func TestReturnOfManyHoldsMakesFewRedisCalls(t *testing.T) {
	d := spawnDaemon(t, forgeRules)
	d.waitReady(15 * time.Second)
	rc := d.managedClient()
	const ip = "192.0.2.4"
	if permits, _ := d.takeLease(ip, 10); permits != 10 {
		t.Fatalf("lease of %d permits, want 10", permits)
	}
	tk := ticket{I: "many-holds", D: time.Now().Add(800 * time.Millisecond).UnixMicro(), P: 10}
	for range 14_000 {
		tk.H = append(tk.H, hold{Rule: "window", Subject: ip, Taken: 1})
	}
	type attempt struct {
		name, lease string
		code        int
		error       string
	}
	tries := []attempt{{"forged", encodeTicket(t, tk, nil, ""), http.StatusForbidden, "lease_forged"}}
	if key, err := rc.Get(context.Background(), "ruled:lease-key").Bytes(); err != nil {
		t.Errorf("the lease key in Redis: %v", err)
	} else {
		tries = append(tries, attempt{"signed", encodeTicket(t, tk, key, ""), http.StatusBadRequest, "too_many_holds"})
	}
	for _, tc := range tries {
		before := redisCalls(t, rc)
		code, text := d.returnLease(ip, tc.lease, 10)
		calls := redisCalls(t, rc) - before - 1 // less the first INFO
		if code != tc.code || !strings.Contains(text, tc.error) {
			t.Errorf("%s return of 14000 holds: %d %.200s, want %d %s", tc.name, code, text, tc.code, tc.error)
		}
		if calls > 50 {
			t.Errorf("%s return of 14000 holds: %d Redis calls meanwhile, want a handful", tc.name, calls)
		}
		t.Logf("%s: %d, %d Redis calls", tc.name, code, calls)
	}
	if n := d.admitted(ip, 10); n != 0 {
		t.Fatalf("admitted %d after the lease took the limit, want 0: a return gave units back", n)
	}
}

// --client-refunds: admin takes refunds (negative hits, lease returns) only
// with the admin token; deny (here from RULED_CLIENT_REFUNDS) takes none,
// token or not; the default, allow, takes them from any client.
func TestClientRefundsSwitch(t *testing.T) {
	const token = "s3cret-admin-token"
	refund := `{"request": {"ip": "192.0.2.9"}, "hits": -1}`
	batch := `{"checks": [{"request": {"ip": "192.0.2.9"}}, {"request": {"ip": "192.0.2.9"}, "hits": -1}]}`
	bearer := []string{"Authorization", "Bearer " + token}

	allow := spawnDaemon(t, forgeRules)
	if code, text := allow.postJSON("/v1/check", refund); code != http.StatusOK {
		t.Errorf("allow (default): negative hits answered %d %s, want 200", code, text)
	}

	admin := spawnDaemon(t, forgeRules, "--client-refunds=admin", "--admin-token", token)
	admin.waitReady(15 * time.Second)
	_, lease := admin.takeLease("192.0.2.9", 4)
	for _, tc := range []struct {
		name, path, body string
		header           []string
		code             int
	}{
		{"negative hits without the token", "/v1/check", refund, nil, http.StatusForbidden},
		{"batch with a refund without the token", "/v1/check/batch", batch, nil, http.StatusForbidden},
		{"lease return without the token", "/v1/lease/return", fmt.Sprintf(`{"returns": [{"request": {"ip": "192.0.2.9"}, "lease": %q, "unused": 4}]}`, lease), nil, http.StatusForbidden},
		{"negative hits with the token", "/v1/check", refund, bearer, http.StatusOK},
		{"lease return with the token", "/v1/lease/return", fmt.Sprintf(`{"returns": [{"request": {"ip": "192.0.2.9"}, "lease": %q, "unused": 4}]}`, lease), bearer, http.StatusOK},
	} {
		code, text := admin.postJSON(tc.path, tc.body, tc.header...)
		if code != tc.code || (code == http.StatusForbidden && !strings.Contains(text, "refunds_refused")) {
			t.Errorf("admin: %s: %d %s, want %d", tc.name, code, text, tc.code)
		}
	}

	t.Setenv("RULED_CLIENT_REFUNDS", "deny")
	deny := spawnDaemon(t, forgeRules, "--admin-token", token)
	if code, text := deny.postJSON("/v1/check", refund, bearer...); code != http.StatusForbidden || !strings.Contains(text, "refunds_refused") {
		t.Errorf("deny: negative hits with the token answered %d %s, want 403 refunds_refused", code, text)
	}
	if code, text := deny.postJSON("/v1/check", `{"request": {"ip": "192.0.2.9"}}`); code != http.StatusOK {
		t.Errorf("deny: a plain check answered %d %s, want 200", code, text)
	}
}
