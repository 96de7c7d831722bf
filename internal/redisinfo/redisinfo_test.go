package redisinfo

import (
	"testing"
	"time"
)

func TestParseCPU(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:9.000000\r\n"
	got, err := ParseCPU(info)
	if err != nil || got != 3750*time.Millisecond {
		t.Errorf("ParseCPU = %v, %v; want 3.75s", got, err)
	}
	if _, err := ParseCPU("# CPU\r\nused_cpu_sys:1.5\r\n"); err == nil {
		t.Error("no used_cpu_user: no error")
	}
}

func TestParseScriptCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5,usec_per_call=0.5\r\n" +
		"cmdstat_eval:calls=2,usec=1\r\ncmdstat_evalsha_ro:calls=100\r\ncmdstat_info:calls=7\r\n"
	if got := scriptCalls(ParseCommands(info)); got != 12 {
		t.Errorf("ParseScriptCalls = %d, want 12", got)
	}
}

func TestParseCalls(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_hincrby:calls=3,usec=5,usec_per_call=1.6\r\ncmdstat_evalsha:calls=1,usec=9\r\n" +
		"cmdstat_config|resetstat:calls=2,usec=1\r\nnot_a_command:calls=5\r\n"
	got := ParseCommands(info)
	if len(got) != 3 || got["hincrby"].Calls != 3 || got["evalsha"].Calls != 1 || got["config|resetstat"].Calls != 2 {
		t.Errorf("ParseCalls = %v, want hincrby 3, evalsha 1, config|resetstat 2", got)
	}
}

// TestCommandUsec: the usec of each command (from bench's former
// commandUsec), 0 for a command Redis did not list.
func TestCommandUsec(t *testing.T) {
	stats := ParseCommands("# Commandstats\r\ncmdstat_evalsha:calls=3,usec=42,usec_per_call=14.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=1,usec=7,usec_per_call=7.00,rejected_calls=0,failed_calls=0\r\n")
	if got := stats["evalsha"].Usec; got != 42 {
		t.Errorf("evalsha: %d, want 42", got)
	}
	if got := stats["eval"].Usec; got != 7 {
		t.Errorf("eval: %d, want 7", got)
	}
	if got := stats["time"].Usec; got != 0 {
		t.Errorf("time: %d, want 0 (absent)", got)
	}
}
