package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rlqsclient "github.com/ruled-dev/ruled/examples/clients/rlqs"
	"github.com/ruled-dev/ruled/internal/redisinfo"
)

// rlqsLoad is one of the -rlqs mode's loads: the fixed window's limit per
// tenant an hour (lease 100).
type rlqsLoad struct {
	name  string
	limit int64
}

// rlqsLoads: every decision allowed, and quota far below what the
// clients ask (each tenant's limit spent in the run).
var rlqsLoads = []rlqsLoad{{"ample", 1_000_000_000}, {"scarce", 1000}}

// rlqsTenants is how many tenants (buckets a client) the load spreads over.
const rlqsTenants = 10

// rlqsRound is one load's figures in one round.
type rlqsRound struct {
	perClient       []float64 // decisions a second, each client
	admitted        []int64   // each tenant, over every client
	unassigned      int64     // admitted without an assignment
	reports, assign int64     // messages, over every client
	ruledCPU        time.Duration
	redisCPU        time.Duration
	calls           int64
	elapsed         time.Duration
}

// runRLQS measures ruled's RLQS face: -rlqs simulated Envoy filters
// (examples/clients/rlqs, reporting every second, denying while a bucket
// has no assignment, so that the figures are the quota's), each on its own gRPC
// connection, each deciding in a loop over rlqsTenants buckets for
// -duration, against one `ruled serve --rlqs-listen` built from this
// repository. It reports decisions a second per client, the messages and
// Redis calls that cost, ruled's and Redis's CPU, and, for the scarce
// load, what the clients admitted against each tenant's limit.
func runRLQS(c config) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ruled-bench-rlqs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "ruled")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/ruled")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building ruled: %v\n%s", err, out)
	}
	st, url, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Printf("rlqs: %d clients, %d buckets each, %v a load, %d rounds\n", c.rlqs, rlqsTenants, c.duration, c.rounds)
	results := map[string][]rlqsRound{}
	for round := range c.rounds {
		for _, load := range rlqsLoads {
			r, err := rlqsOnce(ctx, bin, dir, url, load, c.rlqs, c.duration, round)
			if err != nil {
				return fmt.Errorf("%s: %w", load.name, err)
			}
			results[load.name] = append(results[load.name], r)
		}
	}
	for _, load := range rlqsLoads {
		printRLQS(load, results[load.name])
	}
	return nil
}

// rlqsOnce starts ruled for load, runs the clients against it for d, and
// stops it.
func rlqsOnce(ctx context.Context, bin, dir, redisURL string, load rlqsLoad, clients int, d time.Duration, round int) (rlqsRound, error) {
	var r rlqsRound
	rules := filepath.Join(dir, load.name+".yaml")
	text := fmt.Sprintf(`rules:
  - name: quota
    when: attrs.route == "api"
    subject: attrs.tenant
    plugin: fixedwindow
    config: {limit: %d, window: 1h}
    lease: 100
`, load.limit)
	if err := os.WriteFile(rules, []byte(text), 0o600); err != nil {
		return r, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	rlqsAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	cmd := exec.Command(bin, "serve", "--rules", rules, "--listen", httpAddr, "--rlqs-listen", rlqsAddr, "--redis", redisURL)
	cmd.Dir, cmd.Env = dir, defaultEnv()
	p, err := startProc(cmd, filepath.Join(dir, load.name+".log"))
	if err != nil {
		return r, err
	}
	defer p.stop()
	if err := waitOK(ctx, "http://"+httpAddr+"/readyz", p.exited, time.Minute); err != nil {
		return r, fmt.Errorf("%w\n%s", err, p.logTail())
	}
	st, _, err := openRedis(ctx, redisURL)
	if err != nil {
		return r, err
	}
	defer st.Close()
	cs := make([]*rlqsclient.Client, clients)
	for i := range cs {
		conn, err := grpc.NewClient(rlqsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return r, err
		}
		defer conn.Close()
		if cs[i], err = rlqsclient.New(conn, rlqsclient.Options{Domain: "bench", ReportInterval: time.Second, DenyWithoutAssignment: true}); err != nil {
			return r, err
		}
	}
	// Every round's tenants are new: a window's count starts at 0.
	ids := make([]map[string]string, rlqsTenants)
	for i := range ids {
		ids[i] = map[string]string{"route": "api", "tenant": fmt.Sprintf("r%d-%s-%d", round, load.name, i)}
	}
	cpu0, _, err := treeCPU(p.pid())
	if err != nil {
		return r, err
	}
	redis0, _ := redisinfo.CPU(ctx, st.Client())
	calls0, _ := redisinfo.ScriptCalls(ctx, st.Client())
	admitted := make([][]int64, clients)
	counts := make([]int64, clients)
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range cs {
		admitted[i] = make([]int64, rlqsTenants)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				if n%1024 == 0 && time.Since(start) >= d {
					counts[i] = int64(n)
					return
				}
				if k := n % rlqsTenants; c.Allow(ids[k]) {
					admitted[i][k]++
				}
			}
		}()
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	cpu1, _, _ := treeCPU(p.pid())
	redis1, _ := redisinfo.CPU(ctx, st.Client())
	calls1, _ := redisinfo.ScriptCalls(ctx, st.Client())
	r.ruledCPU, r.redisCPU, r.calls = cpu1-cpu0, redis1-redis0, calls1-calls0
	r.admitted = make([]int64, rlqsTenants)
	for i, c := range cs {
		s := c.Stats()
		r.perClient = append(r.perClient, float64(counts[i])/r.elapsed.Seconds())
		r.unassigned += s.Unassigned
		r.reports += s.Reports
		r.assign += s.Assignments
		for k, n := range admitted[i] {
			r.admitted[k] += n
		}
		_ = c.Close()
	}
	return r, nil
}

// printRLQS prints one load's figures: medians over the rounds, and each
// round's.
func printRLQS(load rlqsLoad, rounds []rlqsRound) {
	fmt.Printf("\n%s (limit %d an hour per tenant, lease 100)\n", load.name, load.limit)
	fmt.Printf("  %-6s %14s %14s %12s %12s %12s %12s %12s\n", "round", "per client/s", "total/s", "reports/s", "assigns/s", "redis calls/s", "ruled CPU", "redis CPU")
	for i, r := range rounds {
		secs := r.elapsed.Seconds()
		total := 0.0
		for _, v := range r.perClient {
			total += v
		}
		med := slices.Clone(r.perClient)
		slices.Sort(med)
		fmt.Printf("  %-6d %14.0f %14.0f %12.1f %12.1f %12.1f %11.1f%% %11.1f%%\n", i+1, med[len(med)/2], total,
			float64(r.reports)/secs, float64(r.assign)/secs, float64(r.calls)/secs,
			100*r.ruledCPU.Seconds()/secs, 100*r.redisCPU.Seconds()/secs)
		if load.limit < 1_000_000 {
			fmt.Printf("         admitted per tenant (limit %d): %v; %d of them without an assignment\n", load.limit, r.admitted, r.unassigned)
		}
	}
}
