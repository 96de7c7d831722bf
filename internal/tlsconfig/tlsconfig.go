// Package tlsconfig serves TLS from a certificate, a key and an optional
// client CA bundle read from files that can be read again while listeners
// keep running: every handshake uses the files as of the last successful
// load, and a failed load keeps the previous ones.
package tlsconfig

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
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
	mu    sync.Mutex // serialises the stores of Reload
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
// invalid file is an error, and so is a certificate that is not valid now
// (expired, or not valid yet) or that does not match the key.
func New(ctx context.Context, f Files) (*Reloader, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("tls: a certificate and a key are both required")
	}
	r := &Reloader{files: f}
	if err := r.Reload(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Reload reads the files again, within ctx. On success new handshakes use
// what it read; on error (New's, or ctx ending first) nothing changes and
// the previous key pair and CA pool still serve. A read that does not end
// (a FIFO nobody writes) is left behind when ctx ends, and what it reads
// is dropped.
func (r *Reloader) Reload(ctx context.Context) error {
	type loaded struct {
		m   *material
		err error
	}
	done := make(chan loaded, 1)
	go func() {
		m, err := load(r.files, time.Now())
		done <- loaded{m, err}
	}()
	var l loaded
	select {
	case l = <-done:
	case <-ctx.Done():
		return fmt.Errorf("tls: reading %s, %s: %w", r.files.Cert, r.files.Key, context.Cause(ctx))
	}
	if l.err != nil {
		return l.err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.Store(l.m)
	return nil
}

// validAt returns nil when leaf, read from file, is valid at now, else an
// error that says which file, its NotBefore or NotAfter, and now.
func validAt(file string, leaf *x509.Certificate, now time.Time) error {
	const layout = time.RFC3339
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("tls: certificate %s expired: NotAfter %s, now %s", file, leaf.NotAfter.UTC().Format(layout), now.UTC().Format(layout))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("tls: certificate %s is not valid yet: NotBefore %s, now %s", file, leaf.NotBefore.UTC().Format(layout), now.UTC().Format(layout))
	}
	return nil
}

// load reads the files and checks that the leaf is valid at now.
func load(f Files, now time.Time) (*material, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, fmt.Errorf("tls: key pair %s, %s: %w", f.Cert, f.Key, err)
	}
	if cert.Leaf == nil { // filled in by LoadX509KeyPair since Go 1.23
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return nil, fmt.Errorf("tls: certificate %s: %w", f.Cert, err)
		}
	}
	if err := validAt(f.Cert, cert.Leaf, now); err != nil {
		return nil, err
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
