package main

// Certificates that are not valid now, certificates about to expire, and
// reloads whose files block on read, against the real binary on loopback.

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/internal/testkit/tlstest"
)

// TestTLSRefusesCertificatesNotValidNow: an expired certificate and one
// not valid yet stop serve at start (exit 1) with a message that names the
// file, says which and gives the bound and now; and on SIGHUP an expired
// certificate is refused and logged while the old one keeps serving.
func TestTLSRefusesCertificatesNotValidNow(t *testing.T) {
	bin := buildRuled(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", tlsRules)
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
		t.Run("start with "+tc.name, func(t *testing.T) {
			certFile, keyFile := tc.pair.Write(t, dir, strings.ReplaceAll(tc.name, " ", "-"))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "serve", "--rules", rules, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
				"--watch=false", "--tls-cert", certFile, "--tls-key", keyFile)
			out, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != 1 {
				t.Fatalf("exit %d (%v), want 1:\n%s", code, err, out)
			}
			for _, w := range append(tc.want, certFile) {
				if !strings.Contains(string(out), w) {
					t.Errorf("the output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(string(out), "ruled serving") {
				t.Fatalf("serve started serving:\n%s", out)
			}
		})
	}

	t.Run("SIGHUP with an expired certificate", func(t *testing.T) {
		first := ca.Server(t)
		certFile, keyFile := first.Write(t, t.TempDir(), "server")
		d := startTLSDaemon(t, ca, nil, nil, "--tls-cert", certFile, "--tls-key", keyFile)
		expired.Write(t, strings.TrimSuffix(certFile, "/server.crt"), "server")
		d.hup(`level=ERROR msg="TLS certificate not reloaded; the previous one still serves"`)
		if line := d.lastLine("TLS certificate not reloaded"); !strings.Contains(line, "expired") || !strings.Contains(line, certFile) {
			t.Errorf("the refusal does not say the certificate in %s expired:\n%s", certFile, line)
		}
		for _, h2 := range []bool{false, true} {
			_, _, serial, err := d.checkHTTPS(clientTLS(ca), h2, "203.0.113.40")
			if err != nil {
				t.Fatalf("a TLS client after the refused reload: %v", err)
			}
			if serial != first.Cert.SerialNumber.String() {
				t.Fatalf("serial %s after the refused reload, want the old %s", serial, first.Cert.SerialNumber)
			}
		}
		if strings.Contains(d.log.String(), "TLS certificate reloaded") {
			t.Fatalf("ruled says it reloaded an expired certificate:\n%s", tail(d.log.String(), 10))
		}
	})
}

// TestTLSWarnsBeforeExpiry: a certificate that expires in 3 days is served
// with a warning in the log, at start and at a reload, and /metrics gives
// the served certificate's NotAfter as ruled_tls_certificate_expiry_seconds;
// one that expires in 8 days gets no warning.
func TestTLSWarnsBeforeExpiry(t *testing.T) {
	const warning = "TLS certificate expires soon"
	ca := tlstest.NewCA(t, "ruled test CA")
	dir := t.TempDir()
	later := ca.ServerValid(t, time.Now().Add(-time.Hour), time.Now().Add(8*24*time.Hour))
	certFile, keyFile := later.Write(t, dir, "server")
	d := startTLSDaemon(t, ca, nil, nil, "--tls-cert", certFile, "--tls-key", keyFile)
	if strings.Contains(d.log.String(), warning) {
		t.Fatalf("a warning for a certificate that expires in 8 days:\n%s", tail(d.log.String(), 10))
	}
	expiry := func() string {
		t.Helper()
		resp, err := httpsClient(clientTLS(ca), true).Get(d.url("/metrics"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		all, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(all), "\n") {
			if v, ok := strings.CutPrefix(l, "ruled_tls_certificate_expiry_seconds "); ok {
				return v
			}
		}
		return ""
	}
	if got, want := expiry(), strconv.FormatInt(later.Cert.NotAfter.Unix(), 10); !sameFloat(got, want) {
		t.Fatalf("ruled_tls_certificate_expiry_seconds %q, want %s", got, want)
	}
	soon := ca.ServerValid(t, time.Now().Add(-time.Hour), time.Now().Add(3*24*time.Hour))
	soon.Write(t, dir, "server")
	d.hup("TLS certificate reloaded")
	// The warning is a line of its own, written after "reloaded": wait for
	// it (none was logged before the reload, so any is the reload's).
	line := d.waitLastLine(warning, 10*time.Second)
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, certFile) {
		t.Errorf("no expiry warning naming %s in the log after the reload:\n%s", certFile, tail(d.log.String(), 10))
	}
	if got, want := expiry(), strconv.FormatInt(soon.Cert.NotAfter.Unix(), 10); !sameFloat(got, want) {
		t.Fatalf("ruled_tls_certificate_expiry_seconds %q after the reload, want %s", got, want)
	}
	d.stop()
	// At start too.
	d = startTLSDaemon(t, ca, nil, nil, "--tls-cert", certFile, "--tls-key", keyFile)
	if line := d.lastLine(warning); !strings.Contains(line, "level=WARN") || !strings.Contains(line, certFile) {
		t.Errorf("no expiry warning naming %s in the log at start:\n%s", certFile, tail(d.log.String(), 10))
	}
}

// sameFloat reports whether a metric's value got is the integer want.
func sameFloat(got, want string) bool {
	g, err := strconv.ParseFloat(got, 64)
	w, err2 := strconv.ParseInt(want, 10, 64)
	return err == nil && err2 == nil && int64(g) == w
}

// TestSIGHUPWithABlockedReadLeavesSignalsWorking: with the certificate, or
// the rule file, replaced by a FIFO nobody writes, SIGHUP starts a reload
// that cannot read it; another SIGHUP is still handled (the log says a
// reload is queued), and SIGTERM makes ruled exit well within the reload
// time-out.
func TestSIGHUPWithABlockedReadLeavesSignalsWorking(t *testing.T) {
	const prompt = reloadTimeout / 2
	// blockThenTerm swaps path for a FIFO, sends SIGHUP twice and then
	// SIGTERM to d, and asserts the above.
	blockThenTerm := func(t *testing.T, d *daemon, path string) {
		t.Helper()
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Fatal(err)
		}
		// Let any read left blocked end with the test.
		t.Cleanup(func() {
			if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
		const queued = "SIGHUP during a reload still in flight"
		if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(d.log.String(), queued); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("a second SIGHUP was not handled within 5s of the first:\n%s", tail(d.log.String(), 10))
			}
			if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		term := time.Now()
		if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-d.exited:
			t.Logf("exited %v after SIGTERM", time.Since(term).Round(time.Millisecond))
		case <-time.After(prompt):
			t.Fatalf("ruled still running %v after SIGTERM, with a reload blocked on a FIFO:\n%s", prompt, tail(d.log.String(), 10))
		}
		if code := d.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("ruled exited %d:\n%s", code, tail(d.log.String(), 10))
		}
	}
	t.Run("certificate", func(t *testing.T) {
		ca := tlstest.NewCA(t, "ruled test CA")
		certFile, keyFile := ca.Server(t).Write(t, t.TempDir(), "server")
		d := startTLSDaemon(t, ca, nil, nil, "--tls-cert", certFile, "--tls-key", keyFile)
		blockThenTerm(t, d.daemon, certFile)
	})
	t.Run("rule file", func(t *testing.T) {
		rules := writeFile(t, t.TempDir(), "rules.yaml", faultRules())
		d := spawnDaemonAt(t, rules, "--watch=false")
		d.waitReady(15 * time.Second)
		blockThenTerm(t, d, rules)
	})
}
