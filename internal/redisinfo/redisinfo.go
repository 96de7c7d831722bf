// Package redisinfo reads what benchmarks and tests measure Redis by from
// its INFO command: the server's CPU time and the commands it has run.
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
	calls, err := Calls(ctx, c)
	if err != nil {
		return 0, err
	}
	return calls["evalsha"] + calls["eval"], nil
}

// ParseScriptCalls sums the EVAL and EVALSHA calls in the text of INFO
// commandstats.
func ParseScriptCalls(info string) int64 {
	calls := ParseCalls(info)
	return calls["evalsha"] + calls["eval"]
}

// Calls is how many times Redis has run each command since its statistics
// were last reset (INFO commandstats), keyed by the command's lower-case
// name; commands a script runs count too.
func Calls(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return ParseCalls(info), nil
}

// ParseCalls reads each command's calls from the text of INFO
// commandstats, keyed by the command's name as Redis writes it.
func ParseCalls(info string) map[string]int64 {
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		if _, v, ok := strings.Cut(rest, "calls="); ok {
			v, _, _ = strings.Cut(v, ",")
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				calls[name] = n
			}
		}
	}
	return calls
}
