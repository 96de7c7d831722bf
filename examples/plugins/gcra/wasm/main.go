// Command wasm is the gcra plugin as a Wasm module:
//
//	ruled plugin build ./examples/plugins/gcra/wasm -o gcra.wasm
//
// which runs
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o gcra.wasm ./examples/plugins/gcra/wasm
package main

import (
	"github.com/ruled-dev/ruled/examples/plugins/gcra"
	"github.com/ruled-dev/ruled/sdk/guest"
)

// A reactor's main never runs: the algorithm registers at initialisation.
func init() { guest.Register(gcra.New()) }

func main() {}
