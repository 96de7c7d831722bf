package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clientLeaseRules are one quota per algorithm that can lease, each per
// client IP with a lease size of 100.
const clientLeaseRules = `rules:
  - name: fixed
    when: request.path == "/fixed"
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 20000, window: 24h}
    lease: 100
  - name: bucket
    when: request.path == "/bucket"
    subject: request.ip
    plugin: tokenbucket
    config: {burst: 20000, rate: 1, per: 1h}
    lease: 100
  - name: rolling
    when: request.path == "/rolling"
    subject: request.ip
    plugin: rolling
    config: {limit: 20000, window: 24h, buckets: 24}
    lease: 100
`

// loadgenReport is loadgen's JSON line.
type loadgenReport struct {
	Decisions, Allowed, Denied, PerSecond, Errors int64
}

// buildLoadgen builds examples/clients/loadgen.
func buildLoadgen(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "loadgen")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/clients/loadgen").CombinedOutput(); err != nil {
		t.Fatalf("go build loadgen: %v\n%s", err, out)
	}
	return bin
}

// TestClientLeasesShareOneLimit runs 2 and 8 loadgen processes with client
// leases, each over-demanding one quota of the real binary in its default
// configuration (managed Redis, ACL isolation): together they admit at
// most the limit and at least the limit less one lease per process, and
// once they have exited (returning what they did not use) ruled counts
// exactly what they admitted.
func TestClientLeasesShareOneLimit(t *testing.T) {
	d := spawnDaemon(t, clientLeaseRules)
	d.waitReady(15 * time.Second)
	loadgen := buildLoadgen(t)
	const limit, lease = 20000, 100
	for _, path := range []string{"/fixed", "/bucket", "/rolling"} {
		for _, clients := range []int{2, 8} {
			t.Run(fmt.Sprintf("%s/%d", strings.TrimPrefix(path, "/"), clients), func(t *testing.T) {
				ip := fmt.Sprintf("192.0.2.%d", clients)
				body := fmt.Sprintf(`{"request": {"ip": %q, "path": %q}}`, ip, path)
				reports := make([]loadgenReport, clients)
				var wg sync.WaitGroup
				for i := range reports {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var out, errs bytes.Buffer
						cmd := exec.Command(loadgen, "--url", d.base, "--rule-request", body, "--goroutines", "4",
							"--duration", "1500ms", "--lease", "on")
						cmd.Stdout, cmd.Stderr = &out, &errs
						if err := cmd.Run(); err != nil {
							t.Errorf("loadgen %d: %v\n%s", i, err, errs.String())
							return
						}
						if err := json.Unmarshal(out.Bytes(), &reports[i]); err != nil {
							t.Errorf("loadgen %d printed %q: %v", i, out.String(), err)
						}
						if errs.Len() > 0 {
							t.Errorf("loadgen %d: %s", i, errs.String())
						}
					}()
				}
				wg.Wait()
				var allowed, denied int64
				for _, r := range reports {
					allowed += r.Allowed
					denied += r.Denied
				}
				bound := int64(clients * lease)
				if allowed > limit || allowed < limit-bound {
					t.Fatalf("%d processes admitted %d, want within [%d, %d]", clients, allowed, limit-bound, limit)
				}
				if denied == 0 {
					t.Fatalf("no process was denied: the test did not over-demand")
				}
				left := peekRemaining(t, d.base, ip, path)
				if path != "/bucket" && left != limit-allowed {
					t.Fatalf("ruled has %d left after %d admitted and every process exited, want %d", left, allowed, limit-allowed)
				}
				t.Logf("%d processes: admitted %d of %d, %d left in ruled, %d denied", clients, allowed, limit, left, denied)
			})
		}
	}
}

// peekRemaining asks the daemon what the rule matching ip and path has left.
func peekRemaining(t *testing.T, base, ip, path string) int64 {
	t.Helper()
	body := fmt.Sprintf(`{"request": {"ip": %q, "path": %q}, "hits": 0}`, ip, path)
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a struct {
		Results []struct {
			Remaining int64 `json:"remaining"`
		} `json:"results"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || len(a.Results) != 1 {
		t.Fatalf("peek: %v %+v", err, a)
	}
	return a.Results[0].Remaining
}
