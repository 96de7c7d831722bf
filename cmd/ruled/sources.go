package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/xds"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/rules"
)

// xdsConfig is where serve takes its rules from an xDS management server
// (--xds-server, or CONFIG_TYPE=GRPC_XDS_SOTW as envoy ratelimit).
type xdsConfig struct {
	server       string
	nodeID       string
	nodeMetadata string
	headers      map[string]string
	useTLS       bool
	tlsCA        string // the CA that signs the server's certificate; "" for the system's
	tlsCert      string // the client's certificate, for mTLS
	tlsKey       string
	serverName   string // the name to verify the server's certificate against
	maxMsg       int
	backoff      time.Duration
	backoffMax   time.Duration
	jitter       float64
	// readyUnconfigured makes the instance ready before the first config
	// arrives (FORCE_START_WITHOUT_INITIAL_CONFIG): it serves no rules,
	// allowing everything, until then.
	readyUnconfigured bool
}

// ruleOrigins counts where serve is told to take its rules from: exactly
// one of --rules, --envoy-configs and --xds-server.
func ruleOrigins(c serveConfig) int {
	n := 0
	for _, s := range []string{c.rules, c.envoyConfigs, c.xds.server} {
		if s != "" {
			n++
		}
	}
	return n
}

// clientTLS is the TLS the xDS client dials with; nil for plaintext.
func (x xdsConfig) clientTLS() (*tls.Config, error) {
	if !x.useTLS {
		return nil, nil
	}
	conf := &tls.Config{ServerName: x.serverName, MinVersion: tls.VersionTLS12}
	if x.tlsCA != "" {
		pem, err := os.ReadFile(x.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("xds server CA: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("xds server CA %s: no PEM certificate in it", x.tlsCA)
		}
	}
	switch {
	case x.tlsCert != "" && x.tlsKey != "":
		pair, err := tls.LoadX509KeyPair(x.tlsCert, x.tlsKey)
		if err != nil {
			return nil, fmt.Errorf("xds client certificate: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	case x.tlsCert != "" || x.tlsKey != "":
		return nil, errors.New("the xds client certificate needs both its certificate and its key")
	}
	return conf, nil
}

// startXDS follows the management server's configs into engine until ctx
// ends; the returned function says whether the instance may be ready.
func startXDS(ctx context.Context, x xdsConfig, merge bool, onTranslate func([]envoyconfig.File), engine *host.Engine, log *slog.Logger) (func() error, error) {
	conf, err := x.clientTLS()
	if err != nil {
		return nil, err
	}
	md, err := parsePairs(x.nodeMetadata, "=")
	if err != nil {
		return nil, fmt.Errorf("xds node metadata: %w", err)
	}
	client := xds.New(engine, xds.Options{Server: x.server, TLS: conf, NodeID: x.nodeID, NodeMetadata: md,
		Headers: x.headers, MaxRecvMsgSize: x.maxMsg, MergeDomains: merge, BackoffInitial: x.backoff,
		BackoffMax: x.backoffMax, BackoffJitter: x.jitter, Logger: log, OnTranslate: onTranslate})
	go func() {
		if err := client.Run(ctx); err != nil {
			log.Error("xds client stopped; the rules loaded last keep serving", "err", err)
		}
	}()
	log.Info("rules from an xds server", "server", x.server, "node", x.nodeID, "tls", conf != nil)
	return func() error {
		if x.readyUnconfigured {
			return nil
		}
		return client.ReadyErr()
	}, nil
}

// envoyFileRules reads envoy ratelimit config files (a file, or a
// directory's *.yaml) and translates them into rules, on each load; a
// translation that parses is given to onTranslate (nil: to nobody) before
// it loads.
func envoyFileRules(path string, merge bool, onTranslate func([]envoyconfig.File)) host.RuleSource {
	return host.RuleSource{Origin: path, Read: func(context.Context) (*rules.Files, error) {
		srcs, err := envoyconfig.ReadSources(path)
		if err != nil {
			return nil, err
		}
		files, _, err := envoyconfig.Translate(srcs, envoyconfig.Options{MergeDomains: merge})
		if err != nil {
			return nil, err
		}
		parsed, err := rules.ParseSources(envoyconfig.RuleSources(files))
		if err == nil && onTranslate != nil {
			onTranslate(files)
		}
		return parsed, err
	}}
}

// parsePairs reads key and value pairs separated by commas, each key and
// value separated by sep, as envoy ratelimit writes its map settings
// (node metadata with "=", headers with ":"). Blank entries are skipped.
func parsePairs(s, sep string) (map[string]string, error) {
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, sep)
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("want key%svalue pairs separated by commas, got %q", sep, kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}
