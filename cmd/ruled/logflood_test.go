package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
)

// TestHandshakeFloodIsRateLimited: 500 TLS handshakes without the client
// certificate that --tls-client-ca asks for are refused, and the log
// says so once (with how many it dropped, in the next line of the kind),
// where it once wrote 500 WARN lines.
func TestHandshakeFloodIsRateLimited(t *testing.T) {
	dir := t.TempDir()
	ca, clients := tlstest.NewCA(t, "ruled test CA"), tlstest.NewCA(t, "clients CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := clients.WriteCA(t, dir, "clients")
	d := startTLSDaemon(t, ca, []tls.Certificate{clients.Client(t, "c").TLS(t)}, nil,
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)
	cfg := clientTLS(ca) // no client certificate
	flood := time.Now()
	refused := 0
	for range 500 {
		conn, err := tls.Dial("tcp", d.httpAddr, cfg)
		if err == nil {
			// TLS 1.3: the server's refusal comes with the first read.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		if err != nil {
			refused++
		}
	}
	if refused != 500 {
		t.Fatalf("%d of 500 handshakes without a client certificate refused", refused)
	}
	// The server logs a refusal after the client saw it: wait for the
	// first line, then give the others as long again to show up.
	start := time.Now()
	for !strings.Contains(d.log.String(), "TLS handshake error") {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("no handshake error logged:\n%s", tail(d.log.String(), 20))
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Since(start) + 100*time.Millisecond)
	// One line of the kind every 10 s (serve.go): a flood that took longer
	// than that on a busy machine may log one more per 10 s it took.
	n := strings.Count(d.log.String(), "TLS handshake error")
	took := time.Since(flood)
	if most := 1 + int(took/(10*time.Second)); n < 1 || n > most {
		t.Errorf("%d handshake error lines for 500 refusals over %v, want 1 (one per 10 s the flood took: at most %d):\n%s", n, took.Round(time.Millisecond), most, tail(d.log.String(), 10))
	}
}

// TestClientHangUpIsCancelledNotDegraded: a client that hangs up while a
// check waits on Redis (held up by CLIENT PAUSE, not down) is counted as
// a cancelled decision; no "decision degraded" line pages whoever alerts
// on them, and the circuit stays closed.
func TestClientHangUpIsCancelledNotDegraded(t *testing.T) {
	rs := redistest.Start(t)
	d := spawnDaemon(t, `rules:
  - {name: first, subject: request.ip, plugin: fixedwindow, config: {limit: 100, window: 1m}}
  - {name: second, subject: request.ip, plugin: fixedwindow, config: {limit: 100, window: 1m}}
`, "--redis", rs.URL())
	d.waitReady(15 * time.Second)
	if a := d.post(`{"request": {"ip": "203.0.113.1"}}`); a.status != 200 || len(a.Results) != 2 { // warm: scripts loaded
		t.Fatalf("check: %+v", a)
	}
	// The pause outlasts the client but not ruled's Redis time-out: the
	// first rule's call succeeds after the client has gone, and the second
	// is asked by a check nobody waits for.
	pause := 150 * time.Millisecond
	hangUps := 0
	for i := range 5 {
		if err := rs.Client().Do(context.Background(), "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), pause/3)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/v1/check",
			strings.NewReader(fmt.Sprintf(`{"request": {"ip": "203.0.113.%d"}}`, 10+i)))
		resp, err := http.DefaultClient.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
		} else {
			hangUps++
		}
		time.Sleep(2 * pause) // the pause and the check end
	}
	if hangUps == 0 {
		t.Fatal("no check outlasted the client's time-out")
	}
	deadline := time.Now().Add(10 * time.Second)
	for d.metric(`ruled_decisions_total{outcome="cancelled",rule="second"}`) == "0" {
		if time.Now().After(deadline) {
			t.Fatalf("no cancelled decision counted after %d hang-ups:\n%s", hangUps, tail(d.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if logs := d.log.String(); strings.Contains(logs, "decision degraded") || strings.Contains(logs, "circuit open") {
		t.Errorf("a client's hang-up was logged as an outage:\n%s", tail(logs, 20))
	}
	if a := d.post(`{"request": {"ip": "203.0.113.99"}}`); a.status != 200 || len(a.Results) != 2 || a.Results[1].Degraded != "" {
		t.Errorf("after the hang-ups: %+v", a)
	}
}
