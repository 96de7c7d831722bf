package main

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/internal/redisinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// envoyConfig is the config both servers load (envoy-config.yaml says
// what it holds).
//
//go:embed envoy-config.yaml
var envoyConfig string

// serverCmd is how to start one rate limit service: its name in reports,
// binary and arguments.
type serverCmd struct {
	name, bin string
	args      []string
}

// rlsServer is one rate limit service under load: ruled as envoy
// ratelimit, or envoy ratelimit itself.
type rlsServer struct {
	*proc
	name    string
	http    string
	conns   []*grpc.ClientConn
	clients []rlsv3.RateLimitServiceClient
}

// startRLS runs bin with envoy ratelimit's environment env plus its own
// listeners on free loopback ports, and waits until /healthcheck says OK.
func startRLS(ctx context.Context, name, bin, dir string, env []string, args []string, conns int) (*rlsServer, error) {
	var addrs [3][2]string
	for i := range addrs {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		h, p, _ := net.SplitHostPort(addr)
		addrs[i] = [2]string{h, p}
	}
	env = append(slices.Clone(env), "HOST="+addrs[0][0], "PORT="+addrs[0][1], "GRPC_HOST="+addrs[1][0], "GRPC_PORT="+addrs[1][1],
		"DEBUG_HOST="+addrs[2][0], "DEBUG_PORT="+addrs[2][1], "PATH="+os.Getenv("PATH"))
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Dir = env, dir
	p, err := startProc(cmd, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s := &rlsServer{proc: p, name: name, http: net.JoinHostPort(addrs[0][0], addrs[0][1])}
	grpcAddr := net.JoinHostPort(addrs[1][0], addrs[1][1])
	for range conns {
		// One connection each: Envoy spreads its calls over a few
		// HTTP/2 connections per upstream host.
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			s.stop()
			return nil, err
		}
		s.conns = append(s.conns, conn)
		s.clients = append(s.clients, rlsv3.NewRateLimitServiceClient(conn))
	}
	if err := waitOK(ctx, "http://"+s.http+"/healthcheck", s.exited, time.Minute); err != nil {
		s.stop()
		return nil, fmt.Errorf("%s: %w\n%s", name, err, s.logTail())
	}
	return s, nil
}

// stop closes the client's connections and stops the server.
func (s *rlsServer) stop() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	s.proc.stop()
}

// ask calls ShouldRateLimit once for key=value on connection i.
func (s *rlsServer) ask(ctx context.Context, i int, key, value string) (rlsv3.RateLimitResponse_Code, error) {
	resp, err := s.clients[i%len(s.clients)].ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}})
	return resp.GetOverallCode(), err
}

// probe shows the server decides as envoy ratelimit's config says: the
// probe key's limit of 3 admits 3 calls and denies the 4th.
func (s *rlsServer) probe(ctx context.Context) error {
	var codes []rlsv3.RateLimitResponse_Code
	for range 4 {
		code, err := s.ask(ctx, 0, "probe", s.name)
		if err != nil {
			return fmt.Errorf("%s: %v\n%s", s.name, err, s.logTail())
		}
		codes = append(codes, code)
	}
	if codes[2] != rlsv3.RateLimitResponse_OK || codes[3] != rlsv3.RateLimitResponse_OVER_LIMIT {
		return fmt.Errorf("%s answered %v to four calls under a limit of 3", s.name, codes)
	}
	return nil
}

// load drives ShouldRateLimit from conc goroutines for d, each request a
// user of subjects; with halfDenied every other request is instead one of
// the denied keys (exhausted by exhaust), which must be denied.
func (s *rlsServer) load(ctx context.Context, users []string, halfDenied bool, conc int, d time.Duration) *result {
	return drive(s.name, d, conc, func(i int) error {
		key, want := "user", rlsv3.RateLimitResponse_OK
		if halfDenied && i%2 == 1 {
			key, want = "denied", rlsv3.RateLimitResponse_OVER_LIMIT
		}
		code, err := s.ask(ctx, i, key, users[i/2%len(users)])
		if err == nil && code != want {
			err = fmt.Errorf("%s: %v, want %v", key, code, want)
		}
		return err
	})
}

// exhaust takes the one request each denied=N key allows, so that every
// later one is denied.
func (s *rlsServer) exhaust(ctx context.Context, users []string) error {
	for _, u := range users {
		if _, err := s.ask(ctx, 0, "denied", u); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// loadHTTP drives envoy ratelimit's HTTP face, POST /json, with wrk and
// bench/envoy-json.lua from conc connections for d over users
// user=N values; with halfDenied every other request is instead one of the
// denied keys. Every response must be 200, or 429 for the denied keys.
func (s *rlsServer) loadHTTP(ctx context.Context, w *wrkRunner, users int, halfDenied bool, conc int, d time.Duration) (*result, error) {
	half := "0"
	if halfDenied {
		half = "1"
	}
	r, out, err := w.runScript(ctx, w.envoyScript, "http://"+s.http+"/json", d, conc, strconv.Itoa(users), half)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	ok, over, other, err := parseStatus(out)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	if err := wantStatuses(ok, over, other, halfDenied, conc, w.threadsFor(conc)); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", s.name, err, s.logTail())
	}
	return r, nil
}

// wantStatuses checks the responses of an HTTP load by status: none but
// 200 and 429; no 429 when every request is allowed; when every other one
// is denied, as many 429s as 200s, give or take the conc requests still in
// flight when the load stopped and one for each of wrk's threads, which
// may stop between a pair.
func wantStatuses(ok, over, other int64, halfDenied bool, conc, threads int) error {
	switch {
	case other > 0:
		return fmt.Errorf("%d responses neither 200 nor 429 (%d 200, %d 429)", other, ok, over)
	case !halfDenied && over > 0:
		return fmt.Errorf("%d of %d requests denied, want none", over, ok+over)
	case halfDenied && (ok-over > int64(conc+threads) || over-ok > int64(conc+threads)):
		return fmt.Errorf("%d requests allowed and %d denied, want half each", ok, over)
	}
	return nil
}

// rlsConns is how many gRPC connections carry conc concurrent calls: one
// per 16, as Envoy spreads its calls over a few HTTP/2 connections per
// upstream host.
func rlsConns(conc int) int { return max(1, conc/16) }

// userValues is the values of the user=N descriptors the loads spread
// over: "0" to n-1, as wrk names them too.
func userValues(n int) []string {
	users := make([]string, n)
	for i := range users {
		users[i] = strconv.Itoa(i)
	}
	return users
}

// envoyRuntime writes bench/envoy-config.yaml as the one config of an
// envoy ratelimit runtime directory at root and returns the environment
// that serves it, as both servers of the envoy mode run: from the private
// redis-server at redisURL (its unix socket), statsd off, warnings only.
func envoyRuntime(root, redisURL string) ([]string, error) {
	socket, ok := strings.CutPrefix(redisURL, "unix://")
	if !ok {
		return nil, errors.New("envoy ratelimit's environment needs the private redis-server (no -redis)")
	}
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
		return nil, err
	}
	return []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"REDIS_SOCKET_TYPE=unix", "REDIS_URL=" + socket, "USE_STATSD=false", "LOG_LEVEL=warn"}, nil
}

// envoyBinary is envoy ratelimit's binary: src itself, or, when src is a
// source tree (github.com/envoyproxy/ratelimit), the binary built from it
// into dir. label names it in the report, with the tree's commit when it is
// a git checkout.
func envoyBinary(ctx context.Context, src, dir string) (bin, label string, err error) {
	fi, err := os.Stat(src)
	if err != nil {
		return "", "", fmt.Errorf("-envoy: %w", err)
	}
	if !fi.IsDir() {
		return src, src, nil
	}
	bin = filepath.Join(dir, "envoy-ratelimit")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./src/service_cmd")
	build.Dir, build.Env = src, append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("building envoy ratelimit in %s: %v\n%s", src, err, out)
	}
	label = "built from " + src
	if rev, err := exec.CommandContext(ctx, "git", "-C", src, "rev-parse", "--short", "HEAD").Output(); err == nil {
		label += " at " + strings.TrimSpace(string(rev))
	}
	return bin, label, nil
}

// runEnvoy compares ruled, run as envoy ratelimit (`ruled envoy-ratelimit`,
// its default configuration for a FILE config), with envoy ratelimit built
// from source (-envoy, envoyBinary): both read the same config directory
// and environment, share one private redis-server, and are driven in turn
// with the protocol floor (floor.go) for -duration, -rounds times, each
// going first in turn, over gRPC
// (the same client, -concurrency calls) and HTTP (wrk, -concurrency
// connections), each under two loads: every call allowed, and every other
// call denied. It reports each one's decisions per second, latency, CPU per
// decision (its process) and Redis CPU per decision, and ruled's ratios to
// envoy ratelimit in each round.
func runEnvoy(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sb, err := setupSideBySide(ctx, c.envoy, "ruled-envoy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(sb.dir)
	st, redisURL, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()
	env, err := envoyRuntime(filepath.Join(sb.dir, "runtime"), redisURL)
	if err != nil {
		return fmt.Errorf("-envoy: %w", err)
	}
	conns := rlsConns(c.conc)
	var servers []*rlsServer
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// servers[0] is ruled, servers[1] envoy ratelimit, servers[2] the
	// protocol floor (floor.go).
	for _, t := range []serverCmd{{"ruled", sb.ruled, []string{"envoy-ratelimit"}}, {"envoy-ratelimit", sb.envoyBin, nil}, {floorName, self, []string{"-serve-floor"}}} {
		s, err := startRLS(ctx, t.name, t.bin, sb.dir, env, t.args, conns)
		if err != nil {
			return err
		}
		servers = append(servers, s)
	}
	for _, s := range servers {
		if err := s.probe(ctx); err != nil {
			return err
		}
	}
	users := userValues(c.subjects)
	for _, s := range servers { // warm up, outside the measurement
		err := s.inDeniedWindow(ctx, users, func() error {
			if r := s.load(ctx, users, true, c.conc, min(c.duration, 2*time.Second)); r.errors > 0 {
				return fmt.Errorf("%s: %d failed calls while warming up\n%s", s.name, r.errors, s.logTail())
			}
			if _, err := s.loadHTTP(ctx, sb.wrk, len(users), true, c.conc, time.Second); err != nil {
				return fmt.Errorf("warming up: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	measure := func(s *rlsServer, http, halfDenied bool) (sample, error) {
		return measureLoad(ctx, st, s, sb.wrk, users, http, halfDenied, c.conc, c.duration)
	}
	phases := []struct {
		name             string
		http, halfDenied bool
	}{{"RLS allowed", false, false}, {"RLS half denied", false, true}, {"HTTP allowed", true, false}, {"HTTP half denied", true, true}}
	// samples[phase][server] holds one sample per round.
	samples := make([][][]sample, len(phases))
	for p := range phases {
		samples[p] = make([][]sample, len(servers))
	}
	for round := 0; round < c.rounds; round++ {
		// Each server goes first, second and last in turn.
		order := []int{0, 1, 2}
		for range round % len(order) {
			order = append(order[1:], order[0])
		}
		for p, ph := range phases {
			for _, i := range order {
				if err := ctx.Err(); err != nil {
					return err
				}
				x, err := measure(servers[i], ph.http, ph.halfDenied)
				if err != nil {
					return fmt.Errorf("%s, round %d: %w", ph.name, round+1, err)
				}
				samples[p][i] = append(samples[p][i], x)
			}
		}
	}

	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(w, "ruled envoy-ratelimit and envoy ratelimit (%s), one redis-server, one descriptor per decision;\n", sb.envoyLabel)
	fmt.Fprintf(w, "%s: grpc-go with ruled's server options and net/http answering canned decisions (no rules, no Redis);\n", floorName)
	fmt.Fprintf(w, "RLS: gRPC ShouldRateLimit, %d concurrent calls over %d connections; HTTP: POST /json from wrk, %d connections;\n", c.conc, conns, c.conc)
	fmt.Fprintf(w, "%d rounds of %v each per load, each server going first in turn, %d subjects; load %s\n",
		c.rounds, c.duration, c.subjects, readLoadAvg())
	for p, ph := range phases {
		fmt.Fprintf(w, "\n%s\tdecisions/s (median)\tmin–max\tp50\tp99\tserver CPU µs/decision\tRedis CPU µs/decision\tRedis reads/decision\t\n", ph.name)
		for i, s := range servers {
			var rates, cpus, reds, reads []float64
			var rs []*result
			for _, x := range samples[p][i] {
				rates, cpus, reds, reads, rs = append(rates, x.r.rate()), append(cpus, x.cpuUS), append(reds, x.redisUS), append(reads, x.reads), append(rs, x.r)
			}
			m := medianRound(rs)
			fmt.Fprintf(w, "%s\t%.0f\t%.0f–%.0f\t%v\t%v\t%.1f\t%.1f\t%.2f\t\n", s.name, median(rates), slices.Min(rates), slices.Max(rates),
				m.percentile(0.50).Round(time.Microsecond), m.percentile(0.99).Round(time.Microsecond), median(cpus), median(reds), median(reads))
		}
		var rateRatio, p99Ratio, cpuRatio, aboveRatio, redisRatio []float64
		for r := range samples[p][0] {
			a, b, floor := samples[p][0][r], samples[p][1][r], samples[p][2][r]
			rateRatio = append(rateRatio, a.r.rate()/b.r.rate())
			p99Ratio = append(p99Ratio, float64(a.r.percentile(0.99))/float64(b.r.percentile(0.99)))
			cpuRatio = append(cpuRatio, a.cpuUS/b.cpuUS)
			aboveRatio = append(aboveRatio, (a.cpuUS-floor.cpuUS)/(b.cpuUS-floor.cpuUS))
			redisRatio = append(redisRatio, a.redisUS/b.redisUS)
		}
		fmt.Fprintf(w, "\nruled / envoy ratelimit (%s)\tmedian\tround by round\t\n", ph.name)
		for _, x := range []struct {
			name string
			v    []float64
		}{{"decisions/s", rateRatio}, {"p99", p99Ratio}, {"server CPU per decision", cpuRatio},
			{"server CPU per decision above the floor", aboveRatio}, {"Redis CPU per decision", redisRatio}} {
			fmt.Fprintf(w, "%s\t%.2f\t%s\t\n", x.name, median(x.v), roundByRound(x.v))
		}
	}
	fmt.Fprintf(w, "\npeak RSS (VmHWM)\t")
	for _, s := range servers {
		mem, _, err := treeMem(s.pid())
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(w, "%s %.0f MB\t", s.name, float64(mem.hwmKB)/1024)
	}
	fmt.Fprintln(w)
	return w.Flush()
}

// sideBySide is what the envoy and scale modes set up alike: a temporary
// directory (the caller removes it), envoy ratelimit's binary and label,
// ruled built from this repository, and wrk.
type sideBySide struct {
	dir, envoyBin, envoyLabel, ruled string
	wrk                              *wrkRunner
}

// setupSideBySide builds both servers from envoySrc and this repository
// into a new temporary directory named with prefix.
func setupSideBySide(ctx context.Context, envoySrc, prefix string) (*sideBySide, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	sb := &sideBySide{dir: dir}
	err = func() error {
		root, err := repoRoot(ctx)
		if err != nil {
			return err
		}
		if sb.envoyBin, sb.envoyLabel, err = envoyBinary(ctx, envoySrc, dir); err != nil {
			return err
		}
		if sb.wrk, err = findWrk(ctx); err != nil {
			return err
		}
		sb.ruled = filepath.Join(dir, "ruled")
		build := exec.CommandContext(ctx, "go", "build", "-o", sb.ruled, "./cmd/ruled")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building ruled: %v\n%s", err, out)
		}
		return nil
	}()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return sb, nil
}

// sample is one load on one server in one round: its figures, and per
// decision the server's CPU, Redis's CPU and Redis's reads; cores and
// redisBusy are the server's and Redis's CPU per second of the load.
type sample struct {
	r                     *result
	cpuUS, redisUS, reads float64
	cores, redisBusy      float64
}

// usage is what the loads have cost so far: a server's CPU, Redis's CPU and
// Redis's reads.
type usage struct {
	cpu, redis time.Duration
	reads      int64
}

func snapshot(ctx context.Context, st *store.Store, s *rlsServer) (u usage, err error) {
	if u.cpu, _, err = treeCPU(s.pid()); err != nil {
		return u, err
	}
	if u.redis, err = redisinfo.CPU(ctx, st.Client()); err != nil {
		return u, err
	}
	u.reads, err = redisinfo.Reads(ctx, st.Client())
	return u, err
}

// measureLoad drives s with one of the envoy mode's loads (over HTTP from
// wrk, or over gRPC) for d and returns its sample; a failed call fails it.
// A half-denied load runs in one window of the denied keys (inDeniedWindow).
func measureLoad(ctx context.Context, st *store.Store, s *rlsServer, wrk *wrkRunner, users []string, http, halfDenied bool, conc int, d time.Duration) (x sample, err error) {
	if !halfDenied {
		return measureOnce(ctx, st, s, wrk, users, http, false, conc, d)
	}
	err = s.inDeniedWindow(ctx, users, func() error {
		x, err = measureOnce(ctx, st, s, wrk, users, http, true, conc, d)
		return err
	})
	return x, err
}

// deniedWindow is the unit of the denied keys' limit in
// bench/envoy-config.yaml: their windows start on the hour, Unix time.
const deniedWindow = time.Hour

// inDeniedWindow runs a load with denied keys: it first takes the request
// each denied key allows (exhaust), and runs it again, once, when a
// window of theirs ended while it ran, since every denied key then allows
// one request more.
func (s *rlsServer) inDeniedWindow(ctx context.Context, users []string, load func() error) error {
	for try := 0; ; try++ {
		start := time.Now()
		if err := s.exhaust(ctx, users); err != nil {
			return err
		}
		err := load()
		if try > 0 || !windowTurned(start, time.Now(), deniedWindow) || ctx.Err() != nil {
			return err
		}
	}
}

// windowTurned reports whether a window of length w that starts at a
// multiple of w in Unix time ended between a and b.
func windowTurned(a, b time.Time, w time.Duration) bool { return !a.Truncate(w).Equal(b.Truncate(w)) }

// measureOnce is measureLoad's one load.
func measureOnce(ctx context.Context, st *store.Store, s *rlsServer, wrk *wrkRunner, users []string, http, halfDenied bool, conc int, d time.Duration) (sample, error) {
	u0, err := snapshot(ctx, st, s)
	if err != nil {
		return sample{}, err
	}
	var r *result
	if http {
		if r, err = s.loadHTTP(ctx, wrk, len(users), halfDenied, conc, d); err != nil {
			return sample{}, err
		}
	} else {
		r = s.load(ctx, users, halfDenied, conc, d)
	}
	u1, err := snapshot(ctx, st, s)
	if err != nil {
		return sample{}, err
	}
	if r.errors > 0 || r.decisions == 0 {
		return sample{}, fmt.Errorf("%s: %d calls, %d failed\n%s", s.name, r.decisions, r.errors, s.logTail())
	}
	n := float64(r.decisions)
	cpu, redis := (u1.cpu - u0.cpu).Seconds(), (u1.redis - u0.redis).Seconds()
	return sample{r: r, cpuUS: cpu * 1e6 / n, redisUS: redis * 1e6 / n, reads: float64(u1.reads-u0.reads) / n,
		cores: cpu / r.elapsed.Seconds(), redisBusy: redis / r.elapsed.Seconds()}, nil
}

// roundByRound lists figures in the order of the rounds.
func roundByRound(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}
