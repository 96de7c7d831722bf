// Command wasm is the leaky plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o leaky.wasm ./plugins/leaky/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(leaky.New()) }

func main() {}
