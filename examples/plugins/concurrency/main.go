// Command concurrency is the concurrency limiter of package limiter as a
// ruled process plugin: at most limit requests in flight per subject.
//
//	go build -o bin/plugins/concurrency ./examples/plugins/concurrency
//
// and declare it in a rule file (rules.yaml in this directory):
//
//	plugins:
//	  concurrency: {process: ../../../bin/plugins/concurrency, sha256: "…"}
//
// Run by hand, it says that it is a plugin and exits.
package main

import (
	"github.com/ruled-dev/ruled/examples/plugins/concurrency/limiter"
	"github.com/ruled-dev/ruled/sdk/process"
)

func main() { process.Serve(limiter.New()) }
