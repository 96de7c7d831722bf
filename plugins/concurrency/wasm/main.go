// Command wasm is the concurrency limiter of package limiter as a ruled
// Wasm plugin: the same algorithm as the process plugin one directory up.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o concurrency.wasm ./examples/plugins/concurrency/wasm
package main

import (
	"github.com/ruled-dev/ruled/examples/plugins/concurrency/limiter"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(limiter.New()) }

func main() {}
