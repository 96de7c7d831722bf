// Command concurrency is ruled's built-in concurrency plugin
// (plugins/concurrency) served as a process plugin: the smallest complete
// process plugin, one call to process.Serve. A third party's algorithm is
// served the same way.
//
//	go build -o bin/plugins/concurrency ./examples/plugins/concurrency
//
// and declare it in a rule file under a name of its own (rules.yaml in
// this directory; a built-in's name cannot be taken):
//
//	plugins:
//	  inflight: {process: ../../../bin/plugins/concurrency, sha256: "…"}
//
// Run by hand, it says that it is a plugin and exits. Its tests, as a
// process and against the native algorithm, are plugins/concurrency's.
package main

import (
	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/sdk/process"
)

func main() { process.Serve(concurrency.New()) }
