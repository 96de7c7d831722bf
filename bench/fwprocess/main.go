// Command fwprocess is the built-in fixedwindow plugin served as a process
// plugin (host/process), for the drivers benchmark (go run ./bench -drivers).
// It is the same algorithm value the native driver links in, so the
// benchmark compares drivers, not algorithms. ruled starts it from a rule
// file's plugins: declaration; run by hand it prints that it is a plugin and
// exits.
package main

import (
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk/process"
)

func main() { process.Serve(fixedwindow.New()) }
