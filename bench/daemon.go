package main

// A `ruled serve` daemon run by the drivers and A/B harnesses.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host/store"
)

// daemon is one running `ruled serve`.
type daemon struct {
	*proc
	sc  driverScenario
	url string // POST /v1/check
	hc  *http.Client
}

// startDaemon starts `ruled serve` for sc in dir, on a free loopback port,
// against redisURL, and waits until /readyz answers 200.
func startDaemon(ctx context.Context, ruled, dir, redisURL string, sc driverScenario, conc int) (*daemon, error) {
	rules := filepath.Join(dir, sc.name+".yaml")
	if err := os.WriteFile(rules, []byte(sc.rules), 0o600); err != nil {
		return nil, fmt.Errorf("%s: writing the rules: %w", sc.name, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sc.name, err)
	}
	args := append([]string{"serve", "--rules", rules, "--listen", addr, "--redis", redisURL}, sc.args...)
	cmd := exec.Command(ruled, args...)
	cmd.Dir, cmd.Env = dir, defaultEnv()
	p, err := startProc(cmd, filepath.Join(dir, sc.name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%s: starting ruled: %w", sc.name, err)
	}
	d := &daemon{proc: p, sc: sc, url: "http://" + addr + "/v1/check",
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc, MaxConnsPerHost: conc}}}
	// Compiling a Wasm module takes seconds on a loaded machine.
	if err := waitOK(ctx, "http://"+addr+"/readyz", d.exited, 3*time.Minute); err != nil {
		d.stop()
		return nil, fmt.Errorf("%s: %w\n%s", sc.name, err, d.logTail())
	}
	return d, nil
}

// freeAddr is a free loopback address, for a server the harness starts.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// defaultEnv is this process's environment without its RULED_*
// variables: ruled run in its default configuration.
func defaultEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RULED_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitOK polls url until it answers 200, the process whose exit closes
// exited is gone, ctx ends, or within passes.
func waitOK(ctx context.Context, url string, exited <-chan struct{}, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		select {
		case <-exited:
			return errors.New("exited while starting")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if resp, err := http.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not 200 after %v", url, within)
		}
	}
}

// stop closes the client's connections and stops ruled.
func (d *daemon) stop() {
	d.hc.CloseIdleConnections()
	d.proc.stop()
}

// check asks one check and wants it allowed and not degraded: the rule
// decides through its driver.
func (d *daemon) check(body []byte) error {
	resp, err := d.hc.Post(d.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", d.sc.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s: reading the answer: %w", d.sc.name, err)
	}
	var a struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Rule     string `json:"rule"`
			Degraded string `json:"degraded"`
		} `json:"results"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &a) != nil || !a.Allowed || len(a.Results) != 1 ||
		a.Results[0].Rule != d.sc.name || a.Results[0].Degraded != "" {
		return fmt.Errorf("%s: want an allowed, undegraded answer of rule %s, got %d: %s\n%s", d.sc.name, d.sc.name, resp.StatusCode, b, d.logTail())
	}
	return nil
}

// load drives POST /v1/check from conc keep-alive connections for dur.
func (d *daemon) load(bodies [][]byte, conc int, dur time.Duration) *result {
	defer d.hc.CloseIdleConnections() // none sits on the daemon during the others' load
	return drive(d.sc.name, dur, conc, func(i int) error { return postCheck(d.hc, d.url, bodies[i%len(bodies)]) })
}

// poolAndHeap scrapes the daemon's /metrics for its Wasm instances and its
// Go heap in use (MiB): what a Wasm driver's RSS is made of.
func (d *daemon) poolAndHeap() (instances, heapMB float64, err error) {
	resp, err := d.hc.Get(strings.TrimSuffix(d.url, "/v1/check") + "/metrics")
	if err != nil {
		return math.NaN(), math.NaN(), fmt.Errorf("%s: /metrics: %w", d.sc.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return math.NaN(), math.NaN(), fmt.Errorf("%s: /metrics: %w", d.sc.name, err)
	}
	instances = math.NaN() // no Wasm module: no pool
	if v, ok := metricSum(string(b), "ruled_plugin_pool_instances"); ok {
		instances = v
	}
	heap, ok := metricSum(string(b), "go_memstats_heap_inuse_bytes")
	heapMB = math.NaN()
	if ok {
		heapMB = heap / (1 << 20)
	}
	return instances, heapMB, nil
}

// metricSum is the sum of every sample of the metric name in a Prometheus
// text exposition, and whether there was one.
func metricSum(text, name string) (float64, bool) {
	var sum float64
	found := false
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		if i := strings.LastIndexByte(rest, '}'); i >= 0 {
			rest = rest[i+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// openRedis opens the store at url, or a private redis-server when url is
// empty, and returns it with the URL a daemon reaches it at.
func openRedis(ctx context.Context, url string) (*store.Store, string, error) {
	st, err := store.Open(ctx, store.Options{URL: url, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Timeout: time.Second})
	if err != nil {
		return nil, "", fmt.Errorf("redis: %w", err)
	}
	if url == "" {
		url = "unix://" + st.SocketPath()
	}
	return st, url, nil
}

// checkBodies are n /v1/check bodies, one per subject (request.ip).
func checkBodies(n int) [][]byte {
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = []byte(fmt.Sprintf(`{"request":{"ip":"10.%d.%d.%d","method":"GET","path":"/"}}`, i>>16&255, i>>8&255, i&255))
	}
	return bodies
}
