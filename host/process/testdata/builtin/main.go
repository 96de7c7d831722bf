// Command builtin serves the built-in plugin named by $RULED_TEST_PLUGIN as
// a process plugin, for host/process's conformance tests and benchmarks.
package main

import (
	"fmt"
	"os"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/sdk/process"
)

func main() {
	name := os.Getenv("RULED_TEST_PLUGIN")
	for _, alg := range builtin.All() {
		if alg.Info().Name == name {
			process.Serve(alg)
			return
		}
	}
	fmt.Fprintf(os.Stderr, "no built-in plugin %q\n", name)
	os.Exit(2)
}
