package main

import (
	"os"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// The command name may hold spaces and parentheses: fields count from the last ')'.
	line := "4242 (ruled (x) y) S 17 4242 17 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 9 0 100 2000000 3000 18446744073709551615\n"
	st, err := parseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if st.ppid != 17 || st.cpu != 2870*time.Millisecond {
		t.Errorf("parseProcStat = %+v, want ppid 17 and 287 ticks (2.87s)", st)
	}
	for _, bad := range []string{"", "1 ruled S 1 2 3", "1 (ruled) S 1 2", "1 (ruled) S x 1 1 0 -1 0 0 0 0 0 1 1 0", "1 (ruled) S 1 1 1 0 -1 0 0 0 0 0 u 1 0"} {
		if _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q): no error", bad)
		}
	}
	// This process's own line parses, and its parent is who started it.
	own, err := readProcStat(os.Getpid())
	if err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	if own.ppid != os.Getppid() {
		t.Errorf("own ppid %d, want %d", own.ppid, os.Getppid())
	}
}

func TestParseProcStatus(t *testing.T) {
	status := "Name:\truled\nVmPeak:\t 1300000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"
	m, err := parseProcStatus(status)
	if err != nil || m.rssKB != 40960 || m.hwmKB != 51200 {
		t.Errorf("parseProcStatus = %+v, %v; want rss 40960, hwm 51200", m, err)
	}
	if _, err := parseProcStatus("Name:\truled\nVmRSS:\t 1 kB\n"); err == nil {
		t.Error("no VmHWM: no error")
	}
	if _, err := parseProcStatus("VmHWM:\t 1 kB\nVmRSS:\t 1 MB\n"); err == nil {
		t.Error("a unit other than kB: no error")
	}
	if _, err := parseProcStatus("VmHWM:\t 1 kB\nVmRSS:\t x kB\n"); err == nil {
		t.Error("not a number: no error")
	}
	if _, err := readProcStatus(os.Getpid()); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
}
