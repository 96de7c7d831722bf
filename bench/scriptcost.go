package main

// The script-cost mode (-script-cost): where Redis's time per decision
// goes, one piece at a time (issue 40).

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/redisinfo"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
)

// costStep is one row of the script-cost breakdown: a Redis call made of
// the row above it and one more piece.
type costStep struct {
	name, adds string
	// src is the script's source; empty for plain commands.
	src string
	// batch, when set, is the number of decisions each call of src makes
	// (batchedSource); costs are then per decision.
	batch int
}

// batchSize is how many decisions the batched step makes per script call.
const batchSize = 16

// batchedSource runs a plugin's script body once per decision of a batch
// in one script call: Redis TIME read once for all, then the body as a
// function of its own KEYS and ARGV, called for each decision's slice of
// the call's keys and arguments (ARGV: the clock, the number of decisions,
// then per decision its key and argument counts and its arguments). It is
// a design probe for issue 40, not how ruled calls scripts: what Redis's
// per-call costs come to when concurrent decisions share one call.
func batchedSource(body string) string {
	return `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function ruled_now_us() return now end
local function decide(KEYS, ARGV)
` + body + `
end
local out, k, a = {}, 1, 3
for i = 1, tonumber(ARGV[2]) do
  local nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  local ks, as = {}, {}
  for j = 1, nk do ks[j] = KEYS[k]; k = k + 1 end
  for j = 1, na do as[j] = ARGV[a]; a = a + 1 end
  out[i] = decide(ks, as)
end
return out
`
}

// decisionReply is a fixedwindow decision's reply: six integers.
const decisionReply = "return {1, 1, 1000000000, 999999999, 60000000, 0}"

// costSteps are the rows, each adding one piece to the previous, ending
// with fixedwindow's production script as the capability registers a
// built-in, the same under a loaded plugin's reply cap, and, for
// comparison, envoy ratelimit's two plain commands.
func costSteps() []costStep {
	var decide, capped, body string
	for _, s := range fixedwindow.New().Info().Scripts {
		if s.Name == "decide" {
			capped = capability.Source(fixedwindow.Name, s.Name, s.Source)
			decide, body = capability.NativeSource(fixedwindow.Name, s.Name, s.Source), s.Source
		}
	}
	return []costStep{
		{"evalsha", "a script call (return 1)", "return 1", 0},
		{"reply", "+ a decision's reply (6 integers)", decisionReply, 0},
		{"time", "+ TIME", "redis.call('TIME')\n" + decisionReply, 0},
		{"wrapped", "+ ruled's prelude (a built-in's)", capability.NativeSource("bench", "wrapped", "redis.call('TIME')\n"+decisionReply), 0},
		{"commands", "+ a grant's HINCRBY", capability.NativeSource("bench", "commands", "redis.call('TIME')\n"+
			"redis.call('HINCRBY', KEYS[1], 'n', 1)\n"+decisionReply), 0},
		{"fixedwindow", "+ the rest of fixedwindow's decide", decide, 0},
		{"capped", "fixedwindow's decide with the reply cap of a loaded plugin", capped, 0},
		{"batched", "fixedwindow's decide, " + strconv.Itoa(batchSize) + " decisions per script call (a probe)", batchedSource(body), batchSize},
		{"incrby+expire", "envoy ratelimit's INCRBY + EXPIRE, no script", "", 0},
	}
}

// costRow is one step's measurement in one round.
type costRow struct {
	calls int64
	// cpuUS is Redis's CPU time per call; cmdUS the time Redis spent in the
	// calls' top-level commands (INFO commandstats), without reading and
	// writing them.
	cpuUS, cmdUS float64
}

// measureCost drives step for d from conc goroutines through go-redis's
// autopipeliner, as the capability sends script calls, with fixedwindow's
// arguments and keys for one of subjects per call (bench:STEP:{N}:c and :d).
func measureCost(ctx context.Context, client redis.UniversalClient, ap *redis.AutoPipeliner, step costStep, subjects, conc int, d time.Duration) (costRow, error) {
	sha := ""
	if step.src != "" {
		var err error
		if sha, err = client.ScriptLoad(ctx, step.src).Result(); err != nil {
			return costRow{}, fmt.Errorf("%s: SCRIPT LOAD: %w", step.name, err)
		}
	}
	if err := client.ConfigResetStat(ctx).Err(); err != nil {
		return costRow{}, err
	}
	cpu0, err := redisinfo.CPU(ctx, client)
	if err != nil {
		return costRow{}, err
	}
	window := strconv.FormatInt(time.Minute.Microseconds(), 10)
	r := drive(step.name, d, conc, func(i int) error {
		tag := "{" + strconv.Itoa(i%subjects) + "}"
		var cmds []redis.Cmder
		if step.batch > 0 {
			line := []any{"evalsha", sha, 2 * step.batch}
			args := []any{"", step.batch}
			for j := range step.batch {
				tag := "{" + strconv.Itoa((i*step.batch+j)%subjects) + "}"
				line = append(line, "bench:"+step.name+":"+tag+":c", "bench:"+step.name+":"+tag+":d")
				args = append(args, 2, 6, "1000000000", window, "0", "1", "", "0")
			}
			cmds = append(cmds, redis.NewCmd(ctx, append(line, args...)...))
		} else if sha != "" {
			cmds = append(cmds, redis.NewCmd(ctx, "evalsha", sha, 2, "bench:"+step.name+":"+tag+":c", "bench:"+step.name+":"+tag+":d",
				"", "1000000000", window, "0", "1", "", "0"))
		} else {
			key := "bench_" + tag + "_" + window
			cmds = append(cmds, redis.NewCmd(ctx, "incrby", key, 1), redis.NewCmd(ctx, "expire", key, 60))
		}
		futures := make([]redis.AutoFuture, len(cmds))
		for j, c := range cmds {
			futures[j] = ap.Submit(ctx, c)
		}
		for j, f := range futures {
			if err := f.Wait(); err != nil {
				return err
			}
			if err := cmds[j].Err(); err != nil {
				return err
			}
		}
		return nil
	})
	if r.errors > 0 || r.decisions == 0 {
		return costRow{}, fmt.Errorf("%s: %d calls, %d failed", step.name, r.decisions, r.errors)
	}
	cpu1, err := redisinfo.CPU(ctx, client)
	if err != nil {
		return costRow{}, err
	}
	stats, err := redisinfo.Commands(ctx, client)
	if err != nil {
		return costRow{}, err
	}
	top := []string{"evalsha"}
	if sha == "" {
		top = []string{"incrby", "expire"}
	}
	var usec int64
	for _, cmd := range top {
		usec += stats[cmd].Usec
	}
	calls := r.decisions * int64(max(step.batch, 1))
	n := float64(calls)
	return costRow{calls: calls, cpuUS: float64((cpu1 - cpu0).Nanoseconds()) / 1e3 / n, cmdUS: float64(usec) / n}, nil
}

// runScriptCost measures costSteps against one Redis (a private
// redis-server unless -redis names one), -rounds times interleaved, and
// reports each step's Redis CPU per call, its time in commands, and what it
// adds to the step above.
func runScriptCost(c config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, _, err := openRedis(ctx, c.redisURL)
	if err != nil {
		return err
	}
	defer st.Close()
	client := st.Client()
	ap, err := autoPipeliner(client)
	if err != nil {
		return err
	}
	defer ap.Close()
	steps := costSteps()
	rows := make([][]costRow, len(steps))
	for round := 0; round < c.rounds; round++ {
		for i, s := range steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			r, err := measureCost(ctx, client, ap, s, c.subjects, c.conc, c.duration)
			if err != nil {
				return err
			}
			rows[i] = append(rows[i], r)
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(w, "Redis's time per decision, piece by piece: %d concurrent callers through go-redis's autopipeliner, %d subjects,\n", c.conc, c.subjects)
	fmt.Fprintf(w, "%d rounds of %v per step, interleaved; load %s\n\n", c.rounds, c.duration, readLoadAvg())
	fmt.Fprintf(w, "step\twhat it is\tRedis CPU µs/decision (median)\tmin–max\tin commands µs/decision\tadds µs (CPU)\t\n")
	prev := 0.0
	for i, s := range steps {
		var cpus, cmds []float64
		for _, r := range rows[i] {
			cpus, cmds = append(cpus, r.cpuUS), append(cmds, r.cmdUS)
		}
		adds := "—"
		if i > 0 && s.src != "" {
			adds = fmt.Sprintf("%+.2f", median(cpus)-prev)
		}
		fmt.Fprintf(w, "%s\t%s\t%.2f\t%.2f–%.2f\t%.2f\t%s\t\n", s.name, s.adds, median(cpus), slices.Min(cpus), slices.Max(cpus), median(cmds), adds)
		prev = median(cpus)
	}
	return w.Flush()
}
