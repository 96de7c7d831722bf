// Command wasm is the tokenbucket plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o tokenbucket.wasm ./plugins/tokenbucket/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(tokenbucket.New()) }

func main() {}
