package main

// A process's CPU time and memory, from /proc.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// treeCPU is pid's CPU time and the sum of its live children's.
func treeCPU(pid int) (self, children time.Duration, err error) {
	st, err := readProcStat(pid)
	if err != nil {
		return 0, 0, err
	}
	for _, c := range procChildren(pid) {
		if cs, err := readProcStat(c); err == nil {
			children += cs.cpu
		}
	}
	return st.cpu, children, nil
}

// treeMem is pid's VmRSS and VmHWM and the sums of its children's, in KiB.
func treeMem(pid int) (self, children procMem, err error) {
	if self, err = readProcStatus(pid); err != nil {
		return self, children, err
	}
	for _, c := range procChildren(pid) {
		if m, err := readProcStatus(c); err == nil {
			children.rssKB += m.rssKB
			children.hwmKB += m.hwmKB
		}
	}
	return self, children, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// procStat is what the harness reads from /proc/PID/stat.
type procStat struct {
	ppid int
	cpu  time.Duration // utime + stime
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, fmt.Errorf("reading the CPU time of process %d: %w", pid, err)
	}
	st, err := parseProcStat(string(b))
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return st, nil
}

// parseProcStat parses a /proc/PID/stat line: the parent's pid (field 4)
// and utime + stime (fields 14 and 15, in clock ticks). The command name
// (field 2) is in parentheses and may hold spaces and parentheses itself,
// so the fields are counted from the last ')'.
func parseProcStat(s string) (procStat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc stat %q: no command name", s)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3, the state
	if len(f) < 13 {
		return procStat{}, fmt.Errorf("/proc stat %q: %d fields after the command name, want at least 13", s, len(f))
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, fmt.Errorf("/proc stat ppid: %w", err)
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("/proc stat CPU time: %w", err)
		}
		ticks += n
	}
	return procStat{ppid: ppid, cpu: time.Duration(ticks) * time.Second / clockTicks}, nil
}

// procMem is a process's resident set now and at its peak, in KiB.
type procMem struct{ rssKB, hwmKB int64 }

func readProcStatus(pid int) (procMem, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procMem{}, fmt.Errorf("reading the memory of process %d: %w", pid, err)
	}
	m, err := parseProcStatus(string(b))
	if err != nil {
		return procMem{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return m, nil
}

// parseProcStatus reads VmRSS and VmHWM ("VmRSS:\t  12345 kB") from
// /proc/PID/status.
func parseProcStatus(s string) (procMem, error) {
	var m procMem
	found := 0
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return procMem{}, fmt.Errorf("/proc status %s: %q, want a number of kB", k, strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return procMem{}, fmt.Errorf("/proc status %s: %w", k, err)
		}
		if k == "VmRSS" {
			m.rssKB = n
		} else {
			m.hwmKB = n
		}
		found++
	}
	if found != 2 {
		return procMem{}, errors.New("/proc status has no VmRSS and VmHWM")
	}
	return m, nil
}

// procChildren lists the live processes whose parent is pid.
func procChildren(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		if st, err := readProcStat(p); err == nil && st.ppid == pid {
			out = append(out, p)
		}
	}
	return out
}
