// Command wasm is the fixedwindow plugin as a Wasm module:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o fixedwindow.wasm ./plugins/fixedwindow/wasm
package main

import (
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(fixedwindow.New()) }

func main() {}
