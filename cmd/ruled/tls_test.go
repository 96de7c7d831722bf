package main

// TLS on both listeners, against the real binary with its managed Redis,
// on loopback: HTTPS (HTTP/1.1 and HTTP/2) and gRPC over TLS, client
// certificates, the key pair and the client CA bundle reread on SIGHUP, and
// the flags that go together.

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
)

// tlsRules allow two checks a minute per client IP.
const tlsRules = `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
`

// tlsDaemon is one ruled process serving both listeners over TLS: the
// faults tests' daemon (its base is https://httpAddr) with its gRPC address.
type tlsDaemon struct {
	*daemon
	httpAddr, grpc string
}

// startTLSDaemon starts the binary with both listeners on loopback, env
// (NAME=value) added to its environment and args appended, and waits until
// /readyz over HTTPS answers 200 to a client trusting ca and presenting
// certs.
func startTLSDaemon(t *testing.T, ca *tlstest.CA, certs []tls.Certificate, env []string, args ...string) *tlsDaemon {
	t.Helper()
	bin := buildRuled(t)
	rules := writeFile(t, t.TempDir(), "rules.yaml", tlsRules)
	dataDir, err := os.MkdirTemp("", "rt-") // short: the managed socket path must fit in sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	httpAddr := freePort(t)
	d := &tlsDaemon{daemon: &daemon{t: t, base: "https://" + httpAddr, dataDir: dataDir, log: &lockedBuffer{}, exited: make(chan struct{})},
		httpAddr: httpAddr, grpc: freePort(t)}
	all := append([]string{"serve", "--rules", rules, "--listen", d.httpAddr, "--grpc-listen", d.grpc,
		"--data-dir", dataDir, "--watch=false"}, args...)
	d.cmd = exec.Command(bin, all...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	d.cmd.Env = append(os.Environ(), env...)
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(d.stop)
	client := httpsClient(clientTLS(ca, certs...), false)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		select {
		case <-d.exited:
			t.Fatalf("ruled exited at start:\n%s", tail(d.log.String(), 30))
		default:
		}
		resp, err := client.Get(d.url("/readyz"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return d
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready over HTTPS within 15s: %v\n%s", err, tail(d.log.String(), 30))
		}
	}
}

// stop ends the daemon as daemon.stop does and checks that it exited 0.
func (d *tlsDaemon) stop() {
	d.daemon.stop()
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		d.t.Errorf("ruled exited %d:\n%s", code, tail(d.log.String(), 30))
	}
}

func (d *tlsDaemon) url(path string) string { return d.base + path }

// hup sends SIGHUP and waits until the log has one more line with msg.
func (d *tlsDaemon) hup(msg string) {
	d.t.Helper()
	before := strings.Count(d.log.String(), msg)
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		d.t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Count(d.log.String(), msg) == before; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			d.t.Fatalf("no %q in the log within 10s of SIGHUP:\n%s", msg, tail(d.log.String(), 20))
		}
	}
}

// lastLine returns the log's last line that holds msg.
func (d *tlsDaemon) lastLine(msg string) string {
	lines := strings.Split(d.log.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], msg) {
			return lines[i]
		}
	}
	return ""
}

// waitLastLine waits up to within for a log line that holds msg and
// returns the last one; "" when none came.
func (d *tlsDaemon) waitLastLine(msg string, within time.Duration) string {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		if line := d.lastLine(msg); line != "" || time.Now().After(deadline) {
			return line
		}
	}
}

// logGrows reports whether, within a second, the log holds more than
// before lines with msg.
func (d *tlsDaemon) logGrows(msg string, before int) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Count(d.log.String(), msg) > before {
			return true
		}
	}
	return false
}

// handshake completes one TLS handshake with addr.
func handshake(addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: cfg}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// clientTLS trusts ca and presents certs. The server name is left to the
// dialer, so the server certificate must name the address dialed.
func clientTLS(ca *tlstest.CA, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), Certificates: certs}
}

// httpsClient is an HTTPS client with connections of its own; with h2 it
// offers HTTP/2, otherwise HTTP/1.1 only.
func httpsClient(cfg *tls.Config, h2 bool) *http.Client {
	tr := &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// checkHTTPS posts one check on a new connection and returns the status,
// the protocol and the serial of the certificate the server presented.
func (d *tlsDaemon) checkHTTPS(cfg *tls.Config, h2 bool, ip string) (status int, proto, serial string, err error) {
	c := httpsClient(cfg, h2)
	defer c.CloseIdleConnections()
	resp, err := c.Post(d.url("/v1/check"), "application/json", strings.NewReader(fmt.Sprintf(`{"request": {"ip": %q}}`, ip)))
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Proto, resp.TLS.PeerCertificates[0].SerialNumber.String(), nil
}

// checkGRPC asks the rate limit service once on a new connection with
// creds and returns the answer and the serial of the certificate the
// server presented.
func (d *tlsDaemon) checkGRPC(creds credentials.TransportCredentials, ip string) (rlsv3.RateLimitResponse_Code, string, error) {
	conn, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(creds))
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var p peer.Peer
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, rlsRequest(ip), grpc.Peer(&p))
	if err != nil {
		return 0, "", err
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return 0, "", fmt.Errorf("peer auth info %T, want TLS", p.AuthInfo)
	}
	return resp.OverallCode, info.State.PeerCertificates[0].SerialNumber.String(), nil
}

func rlsRequest(ip string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}},
	}}
}

// TestTLSServesBothListeners: with --tls-cert and --tls-key, the check API
// answers over HTTPS with HTTP/1.1 and HTTP/2, the status page's endpoints
// too, gRPC answers over TLS, and plain HTTP and plaintext gRPC are not
// served.
func TestTLSServesBothListeners(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ruled test CA")
	server := ca.Server(t)
	certFile, keyFile := server.Write(t, dir, "server")
	d := startTLSDaemon(t, ca, nil, nil, "--tls-cert", certFile, "--tls-key", keyFile)
	wantSerial := server.Cert.SerialNumber.String()
	cfg := clientTLS(ca)

	var got []string
	for i, h2 := range []bool{false, true, false} {
		status, proto, serial, err := d.checkHTTPS(cfg, h2, "203.0.113.1")
		if err != nil {
			t.Fatalf("HTTPS check %d: %v", i+1, err)
		}
		if serial != wantSerial {
			t.Fatalf("HTTPS serial %s, want %s", serial, wantSerial)
		}
		got = append(got, fmt.Sprintf("%d %s", status, proto))
	}
	if want := "[200 HTTP/1.1 200 HTTP/2.0 429 HTTP/1.1]"; fmt.Sprint(got) != want {
		t.Fatalf("HTTPS checks %v, want %s", got, want)
	}

	// The status page and what it reads answer over HTTPS (loopback, no token).
	for _, path := range []string{"/ui/", "/v1/admin/stats", "/metrics"} {
		resp, err := httpsClient(cfg, true).Get(d.url(path))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
	}
	loaded := fmt.Sprintf(`msg="TLS certificate loaded" cert=%s subject="CN=localhost" serial=%X not_after=`, certFile, server.Cert.SerialNumber.Bytes())
	if logs := d.log.String(); !strings.Contains(logs, loaded) {
		t.Errorf("the log lacks %s:\n%s", loaded, tail(logs, 20))
	}
	if logs := d.log.String(); !strings.Contains(logs, "https://"+d.httpAddr+"/ui/") {
		t.Errorf("the log does not give the status page's https:// URL:\n%s", tail(logs, 20))
	}

	// Plain HTTP on the TLS port gets no answer from the API.
	resp, err := http.Post("http://"+d.httpAddr+"/v1/check", "application/json", strings.NewReader(`{"request": {"ip": "203.0.113.2"}}`))
	if err != nil {
		t.Fatalf("plain HTTP: %v, want a 400", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "Client sent an HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP got %d %q, want refused", resp.StatusCode, body)
	}

	creds := credentials.NewTLS(clientTLS(ca))
	var codes []rlsv3.RateLimitResponse_Code
	for i := 0; i < 3; i++ {
		code, serial, err := d.checkGRPC(creds, "198.51.100.1")
		if err != nil {
			t.Fatalf("gRPC call %d over TLS: %v", i+1, err)
		}
		if serial != wantSerial {
			t.Fatalf("gRPC serial %s, want %s", serial, wantSerial)
		}
		codes = append(codes, code)
	}
	if want := "[OK OK OVER_LIMIT]"; fmt.Sprint(codes) != want {
		t.Fatalf("gRPC codes %v, want %s", codes, want)
	}
	if _, _, err := d.checkGRPC(insecure.NewCredentials(), "198.51.100.2"); err == nil {
		t.Fatal("a plaintext gRPC call was served")
	}
	// TLS 1.2 at least, on both listeners.
	for _, addr := range []string{d.httpAddr, d.grpc} {
		for _, v := range []struct {
			max uint16
			ok  bool
		}{{tls.VersionTLS11, false}, {tls.VersionTLS12, true}} {
			cfg := clientTLS(ca)
			cfg.MinVersion, cfg.MaxVersion, cfg.NextProtos = tls.VersionTLS10, v.max, []string{"h2"}
			if err := handshake(addr, cfg); (err == nil) != v.ok {
				t.Errorf("%s with TLS up to %x: %v, want success %v", addr, v.max, err, v.ok)
			}
		}
	}
	// A client that does not trust the server's CA does not get through.
	if _, _, _, err := d.checkHTTPS(clientTLS(tlstest.NewCA(t, "other CA")), true, "203.0.113.3"); err == nil {
		t.Fatal("an HTTPS client trusting another CA got an answer")
	}
}

// refusedLine starts the warning net/http writes, through ruled's log, for
// a refused handshake.
const refusedLine = `level=WARN msg="http: TLS handshake error`

// TestTLSClientCertificates: with --tls-client-ca (all three set through
// the environment), both listeners refuse a client without a certificate
// and one whose certificate another CA signed, and serve one whose
// certificate the CA signed.
func TestTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ruled test CA")
	clients, partners := tlstest.NewCA(t, "clients CA"), tlstest.NewCA(t, "partners CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := writeFile(t, dir, "clients.pem", string(clients.PEM())+string(partners.PEM())) // a bundle of two
	good := clients.Client(t, "envoy").TLS(t)
	d := startTLSDaemon(t, ca, []tls.Certificate{good},
		[]string{"RULED_TLS_CERT=" + certFile, "RULED_TLS_KEY=" + keyFile, "RULED_TLS_CLIENT_CA=" + caFile})

	for i, tc := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no certificate", nil, false},
		{"another CA's certificate", []tls.Certificate{tlstest.NewCA(t, "rogue CA").Client(t, "rogue").TLS(t)}, false},
		{"the CA's certificate", []tls.Certificate{good}, true},
		{"the bundle's other CA's certificate", []tls.Certificate{partners.Client(t, "partner").TLS(t)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := clientTLS(ca, tc.certs...)
			ip := fmt.Sprintf("203.0.113.%d", 100+i) // two checks a case: within the limit
			for _, h2 := range []bool{false, true} {
				status, _, _, err := d.checkHTTPS(cfg, h2, ip)
				switch {
				case tc.ok && (err != nil || status != http.StatusOK):
					t.Errorf("HTTPS (h2 %v): %d %v, want 200", h2, status, err)
				case !tc.ok && err == nil:
					t.Errorf("HTTPS (h2 %v): served with %d, want the handshake refused", h2, status)
				case !tc.ok && !d.logGrows(refusedLine, 0): // one line a kind every 10 s: the first refusal's
					t.Errorf("HTTPS (h2 %v): %v, but ruled logged no refused handshake", h2, err)
				}
			}
			code, _, err := d.checkGRPC(credentials.NewTLS(cfg), fmt.Sprintf("198.51.100.%d", 100+i))
			switch {
			case tc.ok && (err != nil || code != rlsv3.RateLimitResponse_OK):
				t.Errorf("gRPC: %v %v, want OK", code, err)
			case !tc.ok && err == nil:
				t.Errorf("gRPC: served with %v, want the handshake refused", code)
			}
		})
	}
}

// TestTLSReloadsOnSIGHUP: after the files are replaced, SIGHUP makes new
// connections on both listeners see the new certificate while open ones
// keep working; a garbage certificate and SIGHUP keep the last good pair
// serving; a new client CA bundle takes effect on SIGHUP too.
func TestTLSReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ruled test CA")
	clientsA, clientsB := tlstest.NewCA(t, "clients A"), tlstest.NewCA(t, "clients B")
	first := ca.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	caFile := clientsA.WriteCA(t, dir, "clients.pem")
	fromA := clientTLS(ca, clientsA.Client(t, "a").TLS(t))
	fromB := clientTLS(ca, clientsB.Client(t, "b").TLS(t))
	// Client A resumes sessions, as Envoy and browsers do: a resumed session
	// shows the certificate of the handshake it resumes.
	fromA.ClientSessionCache = tls.NewLRUClientSessionCache(16)
	d := startTLSDaemon(t, ca, fromA.Certificates, nil, "--watch=true", "--admin-token", "tok",
		"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)

	// serials returns the serial a new connection sees on each listener.
	serials := func(cfg *tls.Config) (httpSerial, grpcSerial string) {
		t.Helper()
		_, _, httpSerial, err := d.checkHTTPS(cfg, true, "203.0.113.20")
		if err != nil {
			t.Fatalf("HTTPS: %v", err)
		}
		_, grpcSerial, err = d.checkGRPC(credentials.NewTLS(cfg), "198.51.100.20")
		if err != nil {
			t.Fatalf("gRPC: %v", err)
		}
		return httpSerial, grpcSerial
	}
	want := func(what string, pair tlstest.Pair) {
		t.Helper()
		h, g := serials(fromA)
		if w := pair.Cert.SerialNumber.String(); h != w || g != w {
			t.Fatalf("%s: serials HTTPS %s gRPC %s, want %s on both", what, h, g, w)
		}
	}
	want("at start", first)
	resp, err := httpsClient(fromA, true).Get(d.url("/livez"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !resp.TLS.DidResume {
		t.Fatal("client A did not resume its session: the reload checks below would prove less")
	}

	// Connections opened before the reload.
	held := httpsClient(fromA, true)
	defer held.CloseIdleConnections()
	heldSerial := func() string {
		t.Helper()
		resp, err := held.Get(d.url("/livez"))
		if err != nil {
			t.Fatalf("the connection opened before the reload: %v", err)
		}
		resp.Body.Close()
		return resp.TLS.PeerCertificates[0].SerialNumber.String()
	}
	if s := heldSerial(); s != first.Cert.SerialNumber.String() {
		t.Fatalf("held connection serial %s, want %s", s, first.Cert.SerialNumber)
	}
	heldGRPC, err := grpc.NewClient(d.grpc, grpc.WithTransportCredentials(credentials.NewTLS(fromA)))
	if err != nil {
		t.Fatal(err)
	}
	defer heldGRPC.Close()
	callHeld := func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := rlsv3.NewRateLimitServiceClient(heldGRPC).ShouldRateLimit(ctx, rlsRequest("198.51.100.21")); err != nil {
			t.Fatalf("the gRPC connection opened before the reload: %v", err)
		}
	}
	callHeld()

	// Neither the admin API's reload nor the rule watcher rereads the TLS files.
	second := ca.Server(t)
	second.Write(t, dir, "server")
	req, err := http.NewRequest(http.MethodPost, d.url("/v1/admin/reload"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err = httpsClient(fromA, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /v1/admin/reload: %d", resp.StatusCode)
	}
	time.Sleep(300 * time.Millisecond)
	want("replaced, reloaded by the admin API only", first)
	d.hup("TLS certificate reloaded")
	want("after SIGHUP", second)
	if serial := fmt.Sprintf("serial=%X", second.Cert.SerialNumber.Bytes()); !strings.Contains(d.log.String(), serial) {
		t.Errorf("the reload's log line lacks %s:\n%s", serial, tail(d.log.String(), 5))
	}
	if s := heldSerial(); s != first.Cert.SerialNumber.String() {
		t.Fatalf("the held connection now shows serial %s; want it kept with %s", s, first.Cert.SerialNumber)
	}
	callHeld()

	// A garbage certificate: logged, and the second pair keeps serving.
	if err := os.WriteFile(certFile, []byte("-----BEGIN CERTIFICATE-----\ngarbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.hup(`level=ERROR msg="TLS certificate not reloaded; the previous one still serves"`)
	want("after a garbage certificate and SIGHUP", second)
	if serial, line := fmt.Sprintf("serial=%X", second.Cert.SerialNumber.Bytes()), d.lastLine("TLS certificate not reloaded"); !strings.Contains(line, serial) {
		t.Errorf("the failed reload's line does not name the serial still in use, %s:\n%s", serial, line)
	}
	// A valid certificate with the other pair's key: the same.
	if err := os.WriteFile(certFile, ca.Server(t).CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	d.hup(`level=ERROR msg="TLS certificate not reloaded; the previous one still serves"`)
	want("after a mismatched key and SIGHUP", second)
	resp, err = httpsClient(fromA, true).Get(d.url("/readyz"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz after bad reloads: %v %v", resp, err)
	}
	resp.Body.Close()

	// A new client CA bundle (and the good pair back): B's clients get in,
	// A's no longer do, on both listeners.
	second.Write(t, dir, "server")
	clientsB.WriteCA(t, dir, "clients.pem")
	d.hup("TLS certificate reloaded")
	want2 := second.Cert.SerialNumber.String()
	if h, g := serials(fromB); h != want2 || g != want2 {
		t.Fatalf("client B after the CA reload: serials %s %s, want %s", h, g, want2)
	}
	if _, _, _, err := d.checkHTTPS(fromA, true, "203.0.113.22"); err == nil {
		t.Fatal("HTTPS: client A still served after its CA left the bundle")
	}
	if _, _, err := d.checkGRPC(credentials.NewTLS(fromA), "198.51.100.22"); err == nil {
		t.Fatal("gRPC: client A still served after its CA left the bundle")
	}
}

// TestTLSFlagsGoTogether: a TLS flag without its partner, on the command
// line or in the environment, stops serve at once with a message naming
// what is missing; an unreadable key pair stops it before it serves.
func TestTLSFlagsGoTogether(t *testing.T) {
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", tlsRules)
	ca := tlstest.NewCA(t, "ruled test CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	garbage := writeFile(t, dir, "garbage.pem", "not a certificate\n")
	otherCert, _ := ca.Server(t).Write(t, dir, "other")
	for _, tc := range []struct {
		name     string
		env      []string
		args     []string
		wantCode int
		want     string
	}{
		{"cert without key", nil, []string{"--tls-cert", certFile}, 2, "--tls-cert needs --tls-key"},
		{"key without cert", nil, []string{"--tls-key", keyFile}, 2, "--tls-key needs --tls-cert"},
		{"key without cert in the environment", []string{"RULED_TLS_KEY", keyFile}, nil, 2, "--tls-key needs --tls-cert"},
		{"client CA alone", nil, []string{"--tls-client-ca", caFile}, 2, "--tls-client-ca needs --tls-cert and --tls-key"},
		{"garbage certificate", nil, []string{"--tls-cert", garbage, "--tls-key", keyFile}, 1, garbage},
		{"missing certificate", nil, []string{"--tls-cert", dir + "/missing.crt", "--tls-key", keyFile}, 1, dir + "/missing.crt"},
		{"another pair's certificate", nil, []string{"--tls-cert", otherCert, "--tls-key", keyFile}, 1, otherCert},
		{"garbage client CA", nil, []string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", garbage}, 1, garbage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != nil {
				t.Setenv(tc.env[0], tc.env[1])
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			args := append([]string{"serve", "--rules", rules, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}, tc.args...)
			if code := run(ctx, args, &out, &errOut); code != tc.wantCode {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.wantCode, errOut.String())
			}
			if !strings.Contains(errOut.String(), tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, errOut.String())
			}
			if strings.Contains(errOut.String(), "ruled serving") {
				t.Fatalf("serve started serving:\n%s", errOut.String())
			}
		})
	}
}
