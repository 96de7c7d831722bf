package main

// The scale mode: ruled and envoy ratelimit as the cores they are given
// grow (issue 43). For each N of -scale, both servers run pinned to N CPUs
// with GOMAXPROCS=N, beside one private redis-server pinned to CPUs of its
// own, and take the envoy mode's allowed loads over HTTP and gRPC from the
// bench process and wrk, pinned to the CPUs left. The report gives, per N
// and server, decisions/s, the cores the server used, its CPU and Redis's
// per decision and how busy Redis's core was, so that where the curve
// bends, and whether Redis or the server binds there, can be read off.

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"
)

// cpuLayout is which CPUs the scale mode gives Redis, the servers and the
// load.
type cpuLayout struct {
	redis, servers, load []int
}

// scaleLayout lays ns's largest N out on the machine's cpus: Redis on
// redisCPUs, the servers on the first N CPUs after those, the load on
// loadCPUs, or on every CPU left when loadCPUs is empty.
func scaleLayout(cpus int, ns []int, redisCPUs, loadCPUs string) (cpuLayout, error) {
	var l cpuLayout
	var err error
	if l.redis, err = parseCPUList(redisCPUs); err != nil {
		return l, fmt.Errorf("-redis-cpus: %w", err)
	}
	maxN := slices.Max(ns)
	for c := 0; c < cpus && len(l.servers) < maxN; c++ {
		if !slices.Contains(l.redis, c) {
			l.servers = append(l.servers, c)
		}
	}
	if len(l.servers) < maxN {
		return l, fmt.Errorf("-scale %v: %d CPUs for the servers, but this machine has %d, %d of them Redis's", ns, maxN, cpus, len(l.redis))
	}
	if loadCPUs != "" {
		if l.load, err = parseCPUList(loadCPUs); err != nil {
			return l, fmt.Errorf("-load-cpus: %w", err)
		}
	} else {
		for c := 0; c < cpus; c++ {
			if !slices.Contains(l.redis, c) && !slices.Contains(l.servers, c) {
				l.load = append(l.load, c)
			}
		}
		if len(l.load) == 0 {
			return l, fmt.Errorf("-scale %v: no CPU left for the load on this machine's %d; name some with -load-cpus (they then share with Redis or the servers)", ns, cpus)
		}
	}
	for _, c := range slices.Concat(l.redis, l.load) {
		if c >= cpus {
			return l, fmt.Errorf("CPU %d: this machine has %d", c, cpus)
		}
	}
	return l, nil
}

// parseCPUList reads a CPU list as taskset and cpusets write it: "0",
// "1-3", "0,4-7".
func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a {
			return nil, fmt.Errorf("%q is not a CPU list (0,2-5)", s)
		}
		for c := a; c <= b; c++ {
			if !slices.Contains(cpus, c) {
				cpus = append(cpus, c)
			}
		}
	}
	return cpus, nil
}

// cpuList writes cpus as taskset -c reads them.
func cpuList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// pin confines every thread of process pid to cpus; the threads it makes
// later inherit that from the thread that makes them.
func pin(pid int, cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("pinning task %d of %d to CPUs %s: %w", tid, pid, cpuList(cpus), err)
		}
	}
	return nil
}

// runScale is the -scale mode (see the file's comment).
func runScale(c config) error {
	if c.envoy == "" {
		return fmt.Errorf("-scale needs -envoy SOURCE: envoy ratelimit's source tree or a binary built from it")
	}
	ns, err := parseCPUList(c.scale)
	if err != nil || slices.Contains(ns, 0) {
		return fmt.Errorf("-scale %q: want core counts such as 1,2,4,8", c.scale)
	}
	layout, err := scaleLayout(runtime.NumCPU(), ns, c.redisCPUs, c.loadCPUs)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sb, err := setupSideBySide(ctx, c.envoy, "ruled-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sb.dir)
	sb.wrk.threads = len(layout.load)
	st, redisURL, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()
	if st.PID() <= 0 {
		return fmt.Errorf("-scale pins its own redis-server to its CPUs: leave -redis unset")
	}
	if err := pin(st.PID(), layout.redis); err != nil {
		return err
	}
	// The gRPC load runs in this process, and wrk inherits its CPUs.
	if err := pin(os.Getpid(), layout.load); err != nil {
		return err
	}
	env, err := envoyRuntime(filepath.Join(sb.dir, "runtime"), redisURL)
	if err != nil {
		return fmt.Errorf("-scale: %w", err)
	}
	users := userValues(c.subjects)
	loads := []struct {
		name string
		http bool
	}{{"HTTP", true}, {"RLS", false}}
	cmds := []serverCmd{{"ruled", sb.ruled, []string{"envoy-ratelimit"}}, {"envoy-ratelimit", sb.envoyBin, nil}}
	// samples[n][load][server] holds one sample per round.
	samples := make([][][][]sample, len(ns))
	for ni, n := range ns {
		samples[ni] = make([][][]sample, len(loads))
		for li := range loads {
			samples[ni][li] = make([][]sample, len(cmds))
		}
		servers, err := startPinned(ctx, sb.dir, env, layout.servers[:n], c.conc, cmds)
		if err != nil {
			return err
		}
		err = func() error {
			defer func() {
				for _, s := range servers {
					s.stop()
				}
			}()
			for _, s := range servers { // warm up, outside the measurement
				if r := s.load(ctx, users, false, c.conc, min(c.duration, 2*time.Second)); r.errors > 0 {
					return fmt.Errorf("%s on %d CPUs: %d failed calls while warming up\n%s", s.name, n, r.errors, s.logTail())
				}
				if _, err := s.loadHTTP(ctx, sb.wrk, len(users), false, c.conc, time.Second); err != nil {
					return fmt.Errorf("warming up: %w", err)
				}
			}
			for round := 0; round < c.rounds; round++ {
				for li, ld := range loads {
					for k := range servers {
						i := (k + round) % len(servers) // each goes first in turn
						x, err := measureLoad(ctx, st, servers[i], sb.wrk, users, ld.http, false, c.conc, c.duration)
						if err != nil {
							return fmt.Errorf("on %d CPUs, %s, round %d: %w", n, ld.name, round+1, err)
						}
						samples[ni][li][i] = append(samples[ni][li][i], x)
					}
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(w, "ruled envoy-ratelimit and envoy ratelimit (%s) on N CPUs each (GOMAXPROCS=N), every decision allowed;\n", sb.envoyLabel)
	fmt.Fprintf(w, "redis-server on CPUs %s, the servers on CPUs %s (the first N), the load on CPUs %s (wrk -t %d);\n",
		cpuList(layout.redis), cpuList(layout.servers), cpuList(layout.load), sb.wrk.threads)
	fmt.Fprintf(w, "RLS: %d concurrent calls over %d connections; HTTP: POST /json from %d connections; %d rounds of %v per load, %d subjects; load %s\n",
		c.conc, rlsConns(c.conc), c.conc, c.rounds, c.duration, c.subjects, readLoadAvg())
	for li, ld := range loads {
		fmt.Fprintf(w, "\n%s\tN\tdecisions/s (median)\tmin–max\tp99\tserver cores used\tserver CPU µs/decision\tRedis CPU µs/decision\tRedis core busy\t\n", ld.name)
		for ni, n := range ns {
			for i, cmd := range cmds {
				xs := samples[ni][li][i]
				pick := func(f func(sample) float64) []float64 {
					v := make([]float64, len(xs))
					for j, x := range xs {
						v[j] = f(x)
					}
					return v
				}
				rates := pick(func(x sample) float64 { return x.r.rate() })
				rs := make([]*result, len(xs))
				for j, x := range xs {
					rs[j] = x.r
				}
				fmt.Fprintf(w, "%s\t%d\t%.0f\t%.0f–%.0f\t%v\t%.2f\t%.1f\t%.1f\t%.0f %%\t\n", cmd.name, n, median(rates), slices.Min(rates), slices.Max(rates),
					medianRound(rs).percentile(0.99).Round(time.Microsecond), median(pick(func(x sample) float64 { return x.cores })),
					median(pick(func(x sample) float64 { return x.cpuUS })), median(pick(func(x sample) float64 { return x.redisUS })),
					100*median(pick(func(x sample) float64 { return x.redisBusy })))
			}
		}
		fmt.Fprintf(w, "\n%s, ruled / envoy ratelimit\tN\tdecisions/s (median)\tround by round\tgrowth from N=%d: ruled\tenvoy ratelimit\t\n", ld.name, ns[0])
		for ni, n := range ns {
			var ratio []float64
			for r := range samples[ni][li][0] {
				ratio = append(ratio, samples[ni][li][0][r].r.rate()/samples[ni][li][1][r].r.rate())
			}
			growth := func(i int) float64 {
				med := func(xs []sample) float64 {
					v := make([]float64, len(xs))
					for j, x := range xs {
						v[j] = x.r.rate()
					}
					return median(v)
				}
				return med(samples[ni][li][i]) / med(samples[0][li][i])
			}
			fmt.Fprintf(w, "\t%d\t%.2f\t%s\t%.2f\t%.2f\t\n", n, median(ratio), roundByRound(ratio), growth(0), growth(1))
		}
	}
	return w.Flush()
}

// startPinned starts each of cmds confined to cpus, with GOMAXPROCS set to
// their number, on envoy ratelimit's environment env.
func startPinned(ctx context.Context, dir string, env []string, cpus []int, conc int, cmds []serverCmd) ([]*rlsServer, error) {
	env = append(slices.Clone(env), "GOMAXPROCS="+strconv.Itoa(len(cpus)))
	var servers []*rlsServer
	for _, t := range cmds {
		// taskset execs the server: its PID is the server's.
		args := append([]string{"-c", cpuList(cpus), t.bin}, t.args...)
		s, err := startRLS(ctx, t.name, "taskset", dir, env, args, rlsConns(conc))
		if err != nil {
			for _, s := range servers {
				s.stop()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}
