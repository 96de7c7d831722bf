// Package tlsconfig serves TLS from a certificate, a key and an optional
// client CA bundle read from files that can be read again while listeners
// keep running: every handshake uses the files as of the last successful
// load, and a failed load keeps the previous ones.
package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
)

// MinVersion is the oldest TLS version the servers accept.
const MinVersion = tls.VersionTLS12

// Files names the PEM files a Reloader reads.
type Files struct {
	Cert     string // certificate chain, leaf first
	Key      string // private key of the leaf
	ClientCA string // CA bundle client certificates must chain to; empty: no client certificates
}

// Reloader holds the key pair (and client CA pool) that new handshakes use.
// Its methods are safe for concurrent use.
type Reloader struct {
	files Files
	mu    sync.Mutex // serialises Reload
	cur   atomic.Pointer[material]
}

// material is one successful load of the files.
type material struct {
	cert      tls.Certificate
	clientCAs *x509.CertPool // nil without Files.ClientCA
	// tickets only holds the session ticket keys of this load (made and
	// rotated by crypto/tls), shared by every listener: a session resumes
	// on any listener until the next load.
	tickets *tls.Config
}

// New loads the files and returns a Reloader serving them. A missing or
// invalid file is an error.
func New(f Files) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a certificate and a key are both required")
	}
	r := &Reloader{files: f}
	if err := r.Reload(); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again. On success new handshakes use what it read;
// on error nothing changes and the previous key pair and CA pool still serve.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, err := load(r.files)
	if err != nil {
		return err
	}
	r.cur.Store(m)
	return nil
}

func load(f Files) (*material, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: key pair %s, %s: %w", f.Cert, f.Key, err)
	}
	if cert.Leaf == nil { // filled in by LoadX509KeyPair since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.Cert, err)
		}
	}
	m := &material{cert: cert, tickets: &tls.Config{}}
	if f.ClientCA != "" {
		pem, err := os.ReadFile(f.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls: client CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls: client CA bundle %s: no PEM certificate in it", f.ClientCA)
		}
		m.clientCAs = pool
	}
	return m, nil
}

// Leaf returns the certificate that new handshakes present; callers must
// not modify it.
func (r *Reloader) Leaf() *x509.Certificate { return r.cur.Load().cert.Leaf }

// Files returns the files the Reloader reads.
func (r *Reloader) Files() Files { return r.files }

// ServerConfig returns the configuration of one listener offering the ALPN
// protocols nextProtos (most preferred first). Each handshake is served
// from the last successful load through GetConfigForClient, so a Reload
// reaches the listener without restarting it; connections already
// established keep the certificate they were made with, and no session
// from before a Reload resumes after it. With a client CA bundle, clients
// must present a certificate that chains to it.
func (r *Reloader) ServerConfig(nextProtos ...string) *tls.Config {
	l := &listener{r: r, nextProtos: slices.Clone(nextProtos)}
	return &tls.Config{
		MinVersion:         MinVersion,
		NextProtos:         slices.Clone(nextProtos),
		GetConfigForClient: l.configForClient,
	}
}

// listener builds one listener's configuration, once per load.
type listener struct {
	r          *Reloader
	nextProtos []string
	built      atomic.Pointer[built]
}

type built struct {
	from *material
	cfg  *tls.Config
}

func (l *listener) configForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	m := l.r.cur.Load()
	if b := l.built.Load(); b != nil && b.from == m {
		return b.cfg, nil
	}
	cfg := &tls.Config{
		MinVersion:   MinVersion,
		NextProtos:   l.nextProtos,
		Certificates: []tls.Certificate{m.cert},
	}
	if m.clientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = m.clientCAs
	}
	// Session tickets are sealed with the load's keys, not the listener's:
	// a session made before a reload does not resume after it, so every
	// later connection sees the new pair (a ticket that does not decrypt
	// means a full handshake).
	cfg.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		return m.tickets.EncryptTicket(cs, ss)
	}
	cfg.UnwrapSession = func(ticket []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		return m.tickets.DecryptTicket(ticket, cs)
	}
	l.built.Store(&built{from: m, cfg: cfg})
	return cfg, nil
}
