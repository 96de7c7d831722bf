package tlsconfig_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
	"github.com/ruled-dev/ruled/internal/tlsconfig"
)

// serveTLS accepts connections on a loopback listener with cfg, completes
// each handshake and writes one byte, until the test ends.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if c.(*tls.Conn).Handshake() == nil {
					_, _ = c.Write([]byte{1})
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial completes a handshake and reads the server's byte (which, in TLS
// 1.3, is where a refused client certificate shows). It returns the
// connection state.
func dial(t *testing.T, addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: cfg}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		return tls.ConnectionState{}, err
	}
	return c.(*tls.Conn).ConnectionState(), nil
}

func clientConfig(ca *tlstest.CA, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", Certificates: certs}
}

// newReloader writes pair to dir as the server's key pair and returns a
// Reloader serving it, with the client CA bundle clientCA unless "".
func newReloader(t *testing.T, dir string, pair tlstest.Pair, clientCA string) *tlsconfig.Reloader {
	t.Helper()
	certFile, keyFile := pair.Write(t, dir, "server")
	r, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: clientCA})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReloadServesTheNewPairAndKeepsTheOldOnError(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test CA")
	first := ca.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	r, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, r.ServerConfig())

	serialNow := func() string {
		t.Helper()
		st, err := dial(t, addr, clientConfig(ca))
		if err != nil {
			t.Fatal(err)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	if got := serialNow(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s, want the first certificate's %s", got, first.Cert.SerialNumber)
	}

	second := ca.Server(t)
	second.Write(t, dir, "server")
	if got := serialNow(); got != first.Cert.SerialNumber.String() {
		t.Fatalf("serial %s before Reload, want the first %s", got, first.Cert.SerialNumber)
	}
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := serialNow(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serial %s after Reload, want the second %s", got, second.Cert.SerialNumber)
	}
	if r.Leaf().SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("Leaf serial %s, want %s", r.Leaf().SerialNumber, second.Cert.SerialNumber)
	}

	// A garbage certificate, then a key that is not the certificate's: both
	// refused, the second pair still serves.
	if err := os.WriteFile(certFile, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), certFile) {
		t.Fatalf("Reload of garbage: %v, want an error naming %s", err, certFile)
	}
	if got := serialNow(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serial %s after a bad Reload, want the second %s", got, second.Cert.SerialNumber)
	}
	third := ca.Server(t)
	if err := os.WriteFile(certFile, third.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err == nil {
		t.Fatal("Reload of a certificate with another key's file succeeded")
	}
	if got := serialNow(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serial %s after a mismatched Reload, want the second %s", got, second.Cert.SerialNumber)
	}
	// A missing key file: the same.
	second.Write(t, dir, "server")
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("Reload without the key file: %v, want an error naming %s", err, keyFile)
	}
	if got := serialNow(); got != second.Cert.SerialNumber.String() {
		t.Fatalf("serial %s after a Reload without a key, want the second %s", got, second.Cert.SerialNumber)
	}
}

func TestClientCAIsRequiredAndReloaded(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server CA")
	clientsA := tlstest.NewCA(t, "clients A")
	clientsB := tlstest.NewCA(t, "clients B")
	caFile := clientsA.WriteCA(t, dir, "clients.pem")
	r := newReloader(t, dir, ca.Server(t), caFile)
	addr := serveTLS(t, r.ServerConfig())
	fromA := clientsA.Client(t, "a").TLS(t)
	fromB := clientsB.Client(t, "b").TLS(t)

	if _, err := dial(t, addr, clientConfig(ca)); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := dial(t, addr, clientConfig(ca, fromB)); err == nil {
		t.Fatal("a client certificate from another CA was accepted")
	}
	if _, err := dial(t, addr, clientConfig(ca, fromA)); err != nil {
		t.Fatalf("a client certificate from the CA was refused: %v", err)
	}

	clientsB.WriteCA(t, dir, "clients.pem")
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, addr, clientConfig(ca, fromA)); err == nil {
		t.Fatal("after the CA bundle changed, the old CA's client was still accepted")
	}
	if _, err := dial(t, addr, clientConfig(ca, fromB)); err != nil {
		t.Fatalf("after the CA bundle changed, the new CA's client was refused: %v", err)
	}

	// An empty bundle is refused and the last one stays.
	if err := os.WriteFile(caFile, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("Reload of an empty bundle: %v", err)
	}
	if _, err := dial(t, addr, clientConfig(ca, fromB)); err != nil {
		t.Fatalf("after a bad reload, the kept CA's client was refused: %v", err)
	}
}

// A resumed session carries the client chain it was verified with; after
// the CA bundle changes it must not let the old client in again.
func TestResumptionDoesNotOutliveTheClientCA(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "server CA")
	clientsA := tlstest.NewCA(t, "clients A")
	caFile := clientsA.WriteCA(t, dir, "clients.pem")
	r := newReloader(t, dir, ca.Server(t), caFile)
	addr := serveTLS(t, r.ServerConfig())
	cfg := clientConfig(ca, clientsA.Client(t, "a").TLS(t))
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	// The ticket arrives after the handshake; two dials make sure one is cached.
	for range 2 {
		if _, err := dial(t, addr, cfg); err != nil {
			t.Fatal(err)
		}
	}
	st, err := dial(t, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !st.DidResume {
		t.Fatal("the session was not resumed: the test proves nothing")
	}
	tlstest.NewCA(t, "clients B").WriteCA(t, dir, "clients.pem")
	if err := r.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, err := dial(t, addr, cfg); err == nil {
		t.Fatalf("the old CA's client got in after the reload (resumed: %v)", st.DidResume)
	}
}

func TestServerConfigDefaults(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	r := newReloader(t, dir, ca.Server(t), "")
	addr := serveTLS(t, r.ServerConfig("h2", "http/1.1"))

	old := clientConfig(ca)
	old.MaxVersion = tls.VersionTLS11
	if _, err := dial(t, addr, old); err == nil {
		t.Fatal("a TLS 1.1 client was served")
	}
	tls12 := clientConfig(ca)
	tls12.MaxVersion = tls.VersionTLS12
	tls12.NextProtos = []string{"http/1.1"}
	st, err := dial(t, addr, tls12)
	if err != nil {
		t.Fatalf("TLS 1.2 client: %v", err)
	}
	if st.Version != tls.VersionTLS12 || st.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("version %x protocol %q, want TLS 1.2 and http/1.1", st.Version, st.NegotiatedProtocol)
	}
	h2 := clientConfig(ca)
	h2.NextProtos = []string{"h2", "http/1.1"}
	if st, err := dial(t, addr, h2); err != nil || st.NegotiatedProtocol != "h2" {
		t.Fatalf("protocol %q (%v), want h2", st.NegotiatedProtocol, err)
	}
	if _, err := dial(t, addr, &tls.Config{RootCAs: x509.NewCertPool(), ServerName: "localhost"}); err == nil {
		t.Fatal("a client that does not trust the CA completed the handshake")
	}
}

func TestNewRefusesMissingOrBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "server")
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name  string
		files tlsconfig.Files
		want  string
	}{
		{"no key", tlsconfig.Files{Cert: certFile}, "both required"},
		{"no cert", tlsconfig.Files{Key: keyFile}, "both required"},
		{"missing cert", tlsconfig.Files{Cert: missing, Key: keyFile}, missing},
		{"key as cert", tlsconfig.Files{Cert: keyFile, Key: keyFile}, keyFile},
		{"missing CA", tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: missing}, missing},
		{"key as CA", tlsconfig.Files{Cert: certFile, Key: keyFile, ClientCA: keyFile}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsconfig.New(context.Background(), tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error with %q", err, tc.want)
			}
		})
	}
	if _, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile}); err != nil {
		t.Fatalf("New with good files: %v", err)
	}
}

// A session from before a reload does not resume after it: every new
// connection after the reload is a full handshake with the new pair.
func TestReloadEndsSessionResumption(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	r := newReloader(t, dir, ca.Server(t), "")
	addr := serveTLS(t, r.ServerConfig())
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		cfg := clientConfig(ca)
		cfg.MaxVersion = version
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		resumed := false
		for range 3 {
			st, err := dial(t, addr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			resumed = resumed || st.DidResume
		}
		if !resumed {
			t.Fatalf("TLS %x: no session resumed before the reload: the test proves nothing", version)
		}
		next := ca.Server(t)
		next.Write(t, dir, "server")
		if err := r.Reload(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, err := dial(t, addr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if st.DidResume || st.PeerCertificates[0].SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
			t.Fatalf("TLS %x after the reload: resumed %v, serial %s; want a full handshake with %s",
				version, st.DidResume, st.PeerCertificates[0].SerialNumber, next.Cert.SerialNumber)
		}
	}
}

// Listeners share one load's session tickets: a session made on one
// resumes on the other.
func TestSessionsResumeAcrossListeners(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "CA")
	r := newReloader(t, dir, ca.Server(t), "")
	one, two := serveTLS(t, r.ServerConfig("h2")), serveTLS(t, r.ServerConfig("h2", "http/1.1"))
	cfg := clientConfig(ca) // one server name for both: one cache entry
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	if _, err := dial(t, one, cfg); err != nil {
		t.Fatal(err)
	}
	st, err := dial(t, two, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !st.DidResume {
		t.Fatal("a session made on one listener did not resume on the other")
	}
}

// The certificate file may hold intermediates after the leaf: they are
// sent, so a client that trusts only the root verifies the server.
func TestServesTheChain(t *testing.T) {
	dir := t.TempDir()
	root := tlstest.NewCA(t, "root")
	server := root.Intermediate(t, "intermediate").Server(t)
	r := newReloader(t, dir, server, "")
	st, err := dial(t, serveTLS(t, r.ServerConfig()), clientConfig(root))
	if err != nil {
		t.Fatalf("a client trusting the root only: %v", err)
	}
	if len(st.PeerCertificates) != 2 || st.PeerCertificates[0].SerialNumber.Cmp(server.Cert.SerialNumber) != 0 {
		t.Fatalf("server sent %d certificates, want the leaf then the intermediate", len(st.PeerCertificates))
	}
}

// TestRefusesCertificatesNotValidNow: an expired certificate and one not
// valid yet are refused by New, with the file, the bound and now in the
// error, and by Reload, which keeps the pair that serves.
func TestRefusesCertificatesNotValidNow(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ruled test CA")
	now := time.Now()
	expired := ca.ServerValid(t, now.Add(-48*time.Hour), now.Add(-time.Hour))
	future := ca.ServerValid(t, now.Add(time.Hour), now.Add(48*time.Hour))
	for _, tc := range []struct {
		name string
		pair tlstest.Pair
		want []string
	}{
		{"expired", expired, []string{"expired", "NotAfter " + expired.Cert.NotAfter.UTC().Format(time.RFC3339), "now "}},
		{"not valid yet", future, []string{"not valid yet", "NotBefore " + future.Cert.NotBefore.UTC().Format(time.RFC3339), "now "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certFile, keyFile := tc.pair.Write(t, dir, tc.name)
			_, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile})
			if err == nil {
				t.Fatal("New accepted it")
			}
			for _, w := range append(tc.want, certFile) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %v, lacks %q", err, w)
				}
			}
			good := ca.Server(t)
			good.Write(t, dir, tc.name)
			r, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile})
			if err != nil {
				t.Fatal(err)
			}
			tc.pair.Write(t, dir, tc.name)
			if err := r.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
				t.Fatalf("Reload: %v, want %q", err, tc.want[0])
			}
			if r.Leaf().SerialNumber.Cmp(good.Cert.SerialNumber) != 0 {
				t.Fatal("Reload of a refused certificate replaced the one that serves")
			}
		})
	}
}

// TestReloadGivesUpOnABlockedRead: with the certificate path a FIFO nobody
// writes, Reload returns when its context ends, and the pair that served
// still serves.
func TestReloadGivesUpOnABlockedRead(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ruled test CA")
	first := ca.Server(t)
	certFile, keyFile := first.Write(t, dir, "server")
	r, err := tlsconfig.New(context.Background(), tlsconfig.Files{Cert: certFile, Key: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(certFile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(certFile, 0o600); err != nil {
		t.Fatal(err)
	}
	// Whatever happens, let the abandoned read end with the test.
	t.Cleanup(func() {
		if f, err := os.OpenFile(certFile, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- r.Reload(ctx) }()
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), certFile) {
			t.Fatalf("Reload: %v, want the deadline and %s", err, certFile)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Reload still blocked 10s after its context ended")
	}
	if r.Leaf().SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatal("the pair that served was replaced")
	}
}
