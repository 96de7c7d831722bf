package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/ruled-dev/ruled/host"
)

// debugMux returns the pprof handlers on a private mux (never
// http.DefaultServeMux, so that no other package can add to what the debug
// listener serves).
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// startDebug serves pprof on addr, a listener of its own apart from the
// API, and extra's handlers by path. With an empty addr nothing starts.
// stop closes the listener.
func startDebug(addr string, extra map[string]http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listen on %s: %w", addr, err)
	}
	if !loopbackAddr(ln.Addr()) {
		log.Warn("the debug listener is not on loopback: pprof exposes the process's internals", "listen", ln.Addr().String())
	}
	// No write time-out: /debug/pprof/profile streams for ?seconds=N.
	mux := debugMux()
	for path, h := range extra {
		mux.Handle(path, h)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug listener stopped", "err", err)
		}
	}()
	log.Info("pprof serving on the debug listener", "listen", ln.Addr().String(), "path", "/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// loopbackAddr reports whether a listener's address is a loopback one.
func loopbackAddr(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// logPlugins writes one line per built-in plugin as it starts serving on
// driver (native or wasm) and returns the function that writes one line per
// plugin as it stops.
func logPlugins(log *slog.Logger, e *host.Engine, driver string) (stopped func()) {
	infos := e.Inspect().PluginInfos()
	for _, in := range infos {
		log.Info("plugin started", "plugin", in.Name, "version", in.Version, "driver", driver, "scripts", len(in.Scripts))
	}
	return func() {
		for _, in := range infos {
			log.Info("plugin stopped", "plugin", in.Name)
		}
	}
}

// logStatusPage says where the status page is and how it is reached;
// scheme is the listener's, http or https.
func logStatusPage(log *slog.Logger, scheme string, addr net.Addr, token bool) {
	base := scheme + "://" + addr.String()
	url, metrics := base+"/ui/", base+"/metrics"
	switch {
	case token:
		log.Info("status page", "url", url+"#token=<admin token>", "metrics", metrics)
	case loopbackAddr(addr):
		log.Info("status page (loopback, no token)", "url", url, "metrics", metrics)
	default:
		log.Info("status page off: it needs --admin-token on a non-loopback address", "metrics", metrics)
	}
}
