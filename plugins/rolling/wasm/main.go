// Command wasm is the rolling plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rolling.wasm ./plugins/rolling/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(rolling.New()) }

func main() {}
