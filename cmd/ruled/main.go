// Command ruled is the rate-limit policy daemon and its tools.
//
//	ruled serve   --rules PATH [--listen 127.0.0.1:8080] [--redis URL] ...
//	ruled check   [--start-plugins] [--format text|json] PATH
//	ruled eval    --rules PATH --input FILE.json [--format text|json]
//	ruled test    [--redis URL] [--run REGEXP] [--format text|json] PATH...
//	ruled replay  --rules PATH --log FILE [--log-type T] [--map T=EXPR] [--format text|json]
//	ruled plugin  build DIR -o FILE.wasm | inspect FILE.wasm
//	ruled import  envoy PATH -o DIR [--force] [--format text|json]
//	ruled version
//
// Every flag also reads an environment variable: --redis-timeout is
// RULED_REDIS_TIMEOUT, and so on. A flag on the command line wins.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `ruled decides whether a request may go ahead, for many machines at once.

Usage:
  ruled serve --rules PATH [flags]                 run the daemon (ruled serve -h lists the flags); instead of
                                                   --rules: --envoy-configs PATH or --xds-server ADDR
  ruled envoy-ratelimit                            run as envoy ratelimit, configured by its environment
                                                   (also when run under the name ratelimit); docs/envoy.md
  ruled check [--start-plugins] [--format F] PATH  validate rule files; exit 1 on error (ruled check -h)
  ruled eval --rules PATH --input F [--format F]   trace which rules match a /v1/check body (no Redis)
  ruled test [--redis URL] [--format F] PATH...     run rule tests (*_test.yaml); exit 1 on failure (ruled test -h)
  ruled replay --rules PATH --log FILE [flags]      replay an access log through the rules (ruled replay -h)
  ruled plugin new NAME [--lang L] [--kind K]      write a plugin project in Go, AssemblyScript or Rust, with its
                                                   tests and the SDK this ruled carries (ruled plugin -h)
  ruled plugin sdk [DIR]                           rewrite a plugin project's SDK with this ruled's
  ruled plugin build DIR -o F.wasm                 build a Go plugin package as a Wasm module
  ruled plugin inspect F.wasm                      print a module's name, version, scripts, commands and sha256
  ruled import envoy PATH -o DIR [--force] [--format F]
                                                   translate envoy ratelimit configs into rule files (ruled import -h)
  ruled version                                    print the version

  F is text (the default) or json.

PATH is a rule file or a directory of *.yaml files. SIGINT or SIGTERM stops a command
other than serve within a second, with exit status 130 or 143.
`

func main() {
	cmd := ""
	if len(os.Args) > 1 {
		cmd = os.Args[1]
	}
	if isEnvoyName(os.Args[0]) { // an image's /bin/ratelimit: envoy ratelimit's contract
		ctx, stop := onInterrupt(context.Background(), false, os.Stderr)
		code := envoyRatelimit(ctx, os.Args[1:], os.LookupEnv, os.Stderr)
		stop()
		os.Exit(code)
	}
	daemon := cmd == "serve" || cmd == "envoy-ratelimit"
	ctx, stop := onInterrupt(context.Background(), !daemon, os.Stderr)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if sig, ok := interruptedBy(ctx); ok && !daemon {
		code = exitCode(sig)
	}
	stop()
	os.Exit(code)
}

// interruptGrace is how long an offline command has, once interrupted, to
// stop on its own (it looks at its context between units of work) before
// the process exits anyway.
const interruptGrace = time.Second

// interruption is the cause of a context cancelled by a signal.
type interruption struct{ sig syscall.Signal }

func (i interruption) Error() string { return "interrupted by " + signalName(i.sig) }

// onInterrupt returns a context cancelled, with an interruption as its
// cause, at the first SIGINT or SIGTERM. With force, the process exits
// with the signal's status interruptGrace after that, saying so on
// stderr, if the command has not returned by then: an offline command
// stops when asked, whatever it is doing. ruled serve is not forced: it
// drains with time-outs of its own.
func onInterrupt(parent context.Context, force bool, stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			sig, _ := s.(syscall.Signal)
			cancel(interruption{sig})
			if !force {
				return
			}
			select {
			case <-time.After(interruptGrace):
				fmt.Fprintf(stderr, "ruled: interrupted by %s; stopped before the end, its output is incomplete\n", signalName(sig))
				os.Exit(exitCode(sig))
			case <-done:
			}
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

// interruptedBy returns the signal that cancelled ctx, if one did.
func interruptedBy(ctx context.Context) (syscall.Signal, bool) {
	var i interruption
	if errors.As(context.Cause(ctx), &i) {
		return i.sig, true
	}
	return 0, false
}

// exitCode is the shell's status for a process stopped by sig: 130 for
// SIGINT, 143 for SIGTERM.
func exitCode(sig syscall.Signal) int { return 128 + int(sig) }

func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// run executes one command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "envoy-ratelimit":
		return envoyRatelimit(ctx, args[1:], os.LookupEnv, stderr)
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "check":
		return check(ctx, args[1:], stdout, stderr)
	case "eval":
		return evalCmd(ctx, args[1:], stdout, stderr)
	case "test":
		return testCmd(ctx, args[1:], stdout, stderr)
	case "replay":
		return replayCmd(ctx, args[1:], stdout, stderr)
	case "plugin":
		return pluginCmd(ctx, args[1:], stdout, stderr)
	case "import":
		return importCmd(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "ruled %s\n", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "ruled: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}
