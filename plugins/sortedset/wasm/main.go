// Command wasm is the sortedset plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o sortedset.wasm ./plugins/sortedset/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(sortedset.New()) }

func main() {}
