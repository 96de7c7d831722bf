package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// reloadTimeout bounds each reading of the TLS files, as host.ReadTimeout
// bounds the rule files': a file that blocks on read (a FIFO nobody
// writes) fails that reload and the files read before keep serving.
const reloadTimeout = 10 * time.Second

// expiryWarning is how long before the served certificate expires ruled
// warns about it, at start and at each reload; in between,
// ruled_tls_certificate_expiry_seconds is there to alert on.
const expiryWarning = 7 * 24 * time.Hour

// loadTLS reads the key pair (and client CA bundle) that both listeners
// serve; nil without TLS. A certificate that is not valid now (expired, or
// not yet valid) or that does not match the key is an error.
func loadTLS(ctx context.Context, c serveConfig, log *slog.Logger) (*tlsconfig.Reloader, error) {
	f, ok, err := tlsFiles(c)
	if err != nil || !ok {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	defer cancel()
	r, err := tlsconfig.New(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key/--tls-client-ca: %w", err)
	}
	logTLS(log, "TLS certificate loaded", r)
	warnExpiry(log, r, time.Now())
	return r, nil
}

// reloadTLS reads the TLS files again (SIGHUP), within ctx. A failure (a
// bad or not currently valid certificate, a read that did not end in time)
// keeps the pair that serves and says so.
func reloadTLS(ctx context.Context, r *tlsconfig.Reloader, log *slog.Logger) {
	if r == nil {
		return
	}
	if err := r.Reload(ctx); err != nil {
		leaf := r.Leaf()
		log.Error("TLS certificate not reloaded; the previous one still serves", "err", err,
			"serial", serialHex(r), "not_after", leaf.NotAfter)
		return
	}
	logTLS(log, "TLS certificate reloaded", r)
	warnExpiry(log, r, time.Now())
}

// warnExpiry logs a warning when the served certificate expires within
// expiryWarning of now.
func warnExpiry(log *slog.Logger, r *tlsconfig.Reloader, now time.Time) {
	leaf := r.Leaf()
	left := leaf.NotAfter.Sub(now)
	if left >= expiryWarning {
		return
	}
	log.Warn("TLS certificate expires soon; replace the files and send SIGHUP", "cert", r.Files().Cert,
		"serial", serialHex(r), "not_after", leaf.NotAfter, "expires_in", left.Round(time.Second).String())
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
