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
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `ruled decides whether a request may go ahead, for many machines at once.

Usage:
  ruled serve --rules PATH [flags]                 run the daemon (ruled serve -h lists the flags)
  ruled check [--start-plugins] [--format F] PATH  validate rule files; exit 1 on error (ruled check -h)
  ruled eval --rules PATH --input F [--format F]   trace which rules match a /v1/check body (no Redis)
  ruled test [--redis URL] [--format F] PATH...     run rule tests (*_test.yaml); exit 1 on failure (ruled test -h)
  ruled replay --rules PATH --log FILE [flags]      replay an access log through the rules (ruled replay -h)
  ruled plugin build DIR -o F.wasm                 build a Go plugin package as a Wasm module
  ruled plugin inspect F.wasm                      print a module's name, version, scripts, commands and sha256
  ruled import envoy PATH -o DIR [--force] [--format F]
                                                   translate envoy ratelimit configs into rule files (ruled import -h)
  ruled version                                    print the version

  F is text (the default) or json.

PATH is a rule file or a directory of *.yaml files.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "check":
		return check(args[1:], stdout, stderr)
	case "eval":
		return evalCmd(args[1:], stdout, stderr)
	case "test":
		return testCmd(ctx, args[1:], stdout, stderr)
	case "replay":
		return replayCmd(args[1:], stdout, stderr)
	case "plugin":
		return pluginCmd(ctx, args[1:], stdout, stderr)
	case "import":
		return importCmd(args[1:], stdout, stderr)
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
