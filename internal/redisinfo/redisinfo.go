// Package redisinfo reads what benchmarks and tests measure Redis by from
// its INFO command: the server's CPU time, the commands it has run and the
// reads it has processed.
package redisinfo

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// CPU is the Redis server process's CPU time so far (INFO cpu).
func CPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	return ParseCPU(info)
}

// ParseCPU is used_cpu_sys + used_cpu_user from the text of INFO cpu.
func ParseCPU(info string) (time.Duration, error) {
	var total float64
	found := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_sys" && k != "used_cpu_user") {
			continue
		}
		s, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", k, err)
		}
		total += s
		found++
	}
	if found != 2 {
		return 0, errors.New("INFO cpu has no used_cpu_sys and used_cpu_user")
	}
	return time.Duration(total * float64(time.Second)), nil
}

// ScriptCalls is how many EVAL and EVALSHA commands Redis has run since
// its statistics were last reset (INFO commandstats).
func ScriptCalls(ctx context.Context, c redis.UniversalClient) (int64, error) {
	cmds, err := Commands(ctx, c)
	if err != nil {
		return 0, err
	}
	return scriptCalls(cmds), nil
}

// scriptCalls sums the EVAL and EVALSHA calls of cmds.
func scriptCalls(cmds map[string]CommandStat) int64 {
	return cmds["evalsha"].Calls + cmds["eval"].Calls
}

// CommandStat is what INFO commandstats reports of one command since its
// statistics were last reset.
type CommandStat struct {
	// Calls is how many times it ran; commands a script runs count too.
	Calls int64
	// Usec is the time Redis spent in it, in microseconds (for a script,
	// the commands it ran included), without reading and writing it.
	Usec int64
}

// Commands reads INFO commandstats, keyed by each command's lower-case
// name (subcommands as "config|resetstat").
func Commands(ctx context.Context, c redis.UniversalClient) (map[string]CommandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return ParseCommands(info), nil
}

// ParseCommands reads each command's statistics from the text of INFO
// commandstats, keyed by the command's name as Redis writes it.
func ParseCommands(info string) map[string]CommandStat {
	cmds := map[string]CommandStat{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st CommandStat
		for f := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				st.Calls = n
			case "usec":
				st.Usec = n
			}
		}
		cmds[name] = st
	}
	return cmds
}

// Reads is how many reads from its clients Redis has processed (INFO
// stats, total_reads_processed): pipelined commands share one.
func Reads(ctx context.Context, c redis.UniversalClient) (int64, error) {
	info, err := c.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO stats: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("INFO stats has no total_reads_processed")
}
