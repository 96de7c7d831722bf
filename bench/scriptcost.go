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
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
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
	// keys and args are a call's key suffixes and arguments; nil means
	// fixedwindow's (fixedwindowCall).
	keys, args []string
	// alone marks a row that does not build on the one above.
	alone bool
}

// fixedwindowCall is a fixedwindow decision's key suffixes and arguments:
// a one-minute window with room for every call, one hit.
var fixedwindowCall = struct{ keys, args []string }{
	[]string{"c", "d"}, []string{"1000000000", strconv.FormatInt(time.Minute.Microseconds(), 10), "0", "1", "", "0"},
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
	var decide, capped, body, bucket string
	for _, s := range fixedwindow.New().Info().Scripts {
		if s.Name == "decide" {
			capped = capability.Source(fixedwindow.Name, s.Name, s.Source)
			decide, body = capability.NativeSource(fixedwindow.Name, s.Name, s.Source), s.Source
		}
	}
	for _, s := range tokenbucket.New().Info().Scripts {
		if s.Name == "decide" {
			bucket = capability.NativeSource(tokenbucket.Name, s.Name, s.Source)
		}
	}
	return []costStep{
		{name: "evalsha", adds: "a script call (return 1)", src: "return 1"},
		{name: "reply", adds: "+ a decision's reply (6 integers)", src: decisionReply},
		{name: "time", adds: "+ TIME", src: "redis.call('TIME')\n" + decisionReply},
		{name: "wrapped", adds: "+ ruled's prelude (a built-in's)", src: capability.NativeSource("bench", "wrapped", "ruled_now_us()\n"+decisionReply)},
		{name: "commands", adds: "+ a grant's HINCRBY", src: capability.NativeSource("bench", "commands", "ruled_now_us()\n"+
			"redis.call('HINCRBY', KEYS[1], 'n', 1)\n"+decisionReply)},
		{name: "fixedwindow", adds: "+ the rest of fixedwindow's decide", src: decide},
		{name: "capped", adds: "fixedwindow's decide with the reply cap of a loaded plugin", src: capped},
		{name: "batched", adds: "fixedwindow's decide, " + strconv.Itoa(batchSize) + " decisions per script call (a probe)", src: batchedSource(body), batch: batchSize},
		// A bucket of a billion permits a second: every call grants and
		// writes (the level stays a permit below full).
		{name: "tokenbucket", adds: "tokenbucket's decide (its own script, not a step)", src: bucket, alone: true,
			keys: []string{"b"}, args: []string{"1000000000", "1000000", "1000000000", "1", "0"}},
		{name: "incrby+expire", adds: "envoy ratelimit's INCRBY + EXPIRE, no script", alone: true},
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
// keys and arguments (fixedwindow's unless it names its own) for one of
// subjects per call (bench:STEP:{N}:KEY).
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
	keys, args := step.keys, step.args
	if keys == nil {
		keys, args = fixedwindowCall.keys, fixedwindowCall.args
	}
	r := drive(step.name, d, conc, func(i int) error {
		tag := "{" + strconv.Itoa(i%subjects) + "}"
		var cmds []redis.Cmder
		if step.batch > 0 {
			line := []any{"evalsha", sha, len(keys) * step.batch}
			batch := []any{"", step.batch}
			for j := range step.batch {
				tag := "{" + strconv.Itoa((i*step.batch+j)%subjects) + "}"
				for _, k := range keys {
					line = append(line, "bench:"+step.name+":"+tag+":"+k)
				}
				batch = append(batch, len(keys), len(args))
				for _, a := range args {
					batch = append(batch, a)
				}
			}
			cmds = append(cmds, redis.NewCmd(ctx, append(line, batch...)...))
		} else if sha != "" {
			line := []any{"evalsha", sha, len(keys)}
			for _, k := range keys {
				line = append(line, "bench:"+step.name+":"+tag+":"+k)
			}
			for _, a := range args {
				line = append(line, a)
			}
			cmds = append(cmds, redis.NewCmd(ctx, line...))
		} else {
			key := "bench_" + tag + "_60"
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
		if i > 0 && !s.alone {
			adds = fmt.Sprintf("%+.2f", median(cpus)-prev)
		}
		fmt.Fprintf(w, "%s\t%s\t%.2f\t%.2f–%.2f\t%.2f\t%s\t\n", s.name, s.adds, median(cpus), slices.Min(cpus), slices.Max(cpus), median(cmds), adds)
		prev = median(cpus)
	}
	return w.Flush()
}
