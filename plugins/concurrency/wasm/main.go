// Command wasm is the concurrency plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o concurrency.wasm ./plugins/concurrency/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(concurrency.New()) }

func main() {}
