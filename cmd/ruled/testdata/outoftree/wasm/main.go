// Command wasm is the quota plugin as a Wasm module:
//
//	ruled plugin build ./wasm -o quota.wasm
package main

import (
	"example.com/quota"
	"github.com/ruled-dev/ruled/sdk/guest"
)

// A reactor's main never runs: the algorithm registers at initialisation.
func init() { guest.Register(quota.New()) }

func main() {}
