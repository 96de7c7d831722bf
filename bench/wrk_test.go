package main

import (
	"testing"
	"time"
)

func TestParseWrk(t *testing.T) {
	r, err := parseWrk("Running 3s test @ http://127.0.0.1:1/v1/check\nRESULT 24000 3001000 2500 9000 15000 3\n")
	if err != nil {
		t.Fatal(err)
	}
	if r.decisions != 24000 || r.elapsed != 3001*time.Millisecond || r.errors != 3 ||
		r.fixed != [3]time.Duration{2500 * time.Microsecond, 9 * time.Millisecond, 15 * time.Millisecond} {
		t.Errorf("parseWrk = %+v", r)
	}
	if _, err := parseWrk("no result here"); err == nil {
		t.Error("no RESULT line: no error")
	}
	if _, err := parseWrk("RESULT 1 2 3 x 5 6"); err == nil {
		t.Error("bad number: no error")
	}
}

func TestParseStatus(t *testing.T) {
	ok, over, other, err := parseStatus("RESULT 30 1000 1 2 3 0\nSTATUS 15 14 1\n")
	if err != nil || ok != 15 || over != 14 || other != 1 {
		t.Errorf("parseStatus = %d, %d, %d, %v; want 15, 14, 1, nil", ok, over, other, err)
	}
	if _, _, _, err := parseStatus("RESULT 30 1000 1 2 3 0\n"); err == nil {
		t.Error("no STATUS line: no error")
	}
	if _, _, _, err := parseStatus("STATUS 1 x 0"); err == nil {
		t.Error("bad number: no error")
	}
}
