package main

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/ruled-dev/ruled/internal/tlsconfig"
)

// tlsFiles checks the TLS flags of serve: --tls-cert and --tls-key go
// together, and --tls-client-ca needs them. ok is false when TLS is off.
func tlsFiles(c serveConfig) (f tlsconfig.Files, ok bool, err error) {
	switch {
	case c.tlsCert != "" && c.tlsKey == "":
		return f, false, errors.New("--tls-cert needs --tls-key (the certificate's private key): give both or neither")
	case c.tlsCert == "" && c.tlsKey != "":
		return f, false, errors.New("--tls-key needs --tls-cert (the certificate chain): give both or neither")
	case c.tlsCert == "" && c.tlsClientCA != "":
		return f, false, errors.New("--tls-client-ca needs --tls-cert and --tls-key: client certificates are only asked for over TLS")
	case c.tlsCert == "":
		return f, false, nil
	}
	return tlsconfig.Files{Cert: c.tlsCert, Key: c.tlsKey, ClientCA: c.tlsClientCA}, true, nil
}

// loadTLS reads the key pair (and client CA bundle) that both listeners
// serve; nil without TLS.
func loadTLS(c serveConfig, log *slog.Logger) (*tlsconfig.Reloader, error) {
	f, ok, err := tlsFiles(c)
	if err != nil || !ok {
		return nil, err
	}
	r, err := tlsconfig.New(f)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca: %w", err)
	}
	logTLS(log, "TLS certificate loaded", r)
	return r, nil
}

// reloadTLS reads the TLS files again (SIGHUP). A failure keeps the pair
// that serves and says so.
func reloadTLS(r *tlsconfig.Reloader, log *slog.Logger) {
	if r == nil {
		return
	}
	if err := r.Reload(); err != nil {
		leaf := r.Leaf()
		log.Error("TLS certificate not reloaded; the previous one still serves", "err", err,
			"serial", serialHex(r), "not_after", leaf.NotAfter)
		return
	}
	logTLS(log, "TLS certificate reloaded", r)
}

// logTLS writes one line about the serving certificate.
func logTLS(log *slog.Logger, msg string, r *tlsconfig.Reloader) {
	leaf, f := r.Leaf(), r.Files()
	attrs := []any{"cert", f.Cert, "subject", leaf.Subject.String(), "serial", serialHex(r), "not_after", leaf.NotAfter}
	if f.ClientCA != "" {
		attrs = append(attrs, "client_ca", f.ClientCA)
	}
	log.Info(msg, attrs...)
}

// serialHex is the serving certificate's serial as openssl x509 -serial
// prints it: two upper-case hex digits a byte.
func serialHex(r *tlsconfig.Reloader) string {
	b := r.Leaf().SerialNumber.Bytes()
	if len(b) == 0 {
		return "00"
	}
	return fmt.Sprintf("%X", b)
}

// scheme is the URL scheme of the HTTP listener.
func scheme(r *tlsconfig.Reloader) string {
	if r == nil {
		return "http"
	}
	return "https"
}
