package httpapi

import "testing"

func TestLoopbackChecks(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:5000": true, "[::ffff:127.0.0.1]:5000": true,
		"192.0.2.1:5000": false, "[2001:db8::1]:5000": false, "": false, "garbage": false,
	} {
		if got := loopbackPeer(addr); got != want {
			t.Errorf("loopbackPeer(%q) = %v", addr, got)
		}
	}
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST:8080": true, "127.0.0.1": true, "127.1.2.3:8080": true, "[::1]:8080": true, "::1": true,
		"evil.example": false, "evil.example:8080": false, "localhost.evil.example": false, "192.0.2.1:8080": false, "": false,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v", host, got)
		}
	}
}
