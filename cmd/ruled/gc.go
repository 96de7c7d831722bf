package main

import (
	"errors"
	"log/slog"
	"runtime/debug"
	"runtime/metrics"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// daemonGCPercent is the daemons' garbage collection target when GOGC is
// not set: the heap may grow to five times what is live before a cycle,
// instead of Go's twice. A decision allocates a few kilobytes and keeps
// none, so cycles come as often as the heap target allows; at 400 a
// decision costs about a tenth less CPU than at 100 for tens of megabytes
// more RSS (docs/operations.md, "Sizing").
const daemonGCPercent = 400

// memLimitShare is the share of the memory limit of ruled's cgroup (a
// container's limit) under which the collector keeps the heap when
// GOMEMLIMIT is not set: the higher target never runs a container out of
// memory that Go's default would have fitted in.
const memLimitShare = 0.9

// tuneGC sets the daemon's collector: daemonGCPercent unless GOGC is set,
// and a soft memory limit of memLimitShare of what limit reports unless
// GOMEMLIMIT is set. lookup reads the environment; limit is the memory
// limit's source (memlimit.FromCgroup in the daemons).
func tuneGC(log *slog.Logger, lookup func(string) (string, bool), limit memlimit.Provider) {
	percent := "GOGC"
	if _, set := lookup("GOGC"); !set {
		debug.SetGCPercent(daemonGCPercent)
		percent = "default"
	}
	memLimit := "GOMEMLIMIT"
	if _, set := lookup("GOMEMLIMIT"); !set {
		n, err := limit()
		switch {
		case errors.Is(err, memlimit.ErrNoLimit):
			memLimit = "none"
		case err != nil:
			memLimit = "none"
			log.Warn("gc: no memory limit from the cgroup", "err", err)
		default:
			debug.SetMemoryLimit(int64(float64(n) * memLimitShare))
			memLimit = "cgroup"
		}
	}
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	log.Info("gc", "percent", s[0].Value.Uint64(), "percent_from", percent, "memory_limit", s[1].Value.Uint64(), "memory_limit_from", memLimit)
}
