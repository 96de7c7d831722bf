// Command badimport is a plugin that imports a function ruled does not
// provide.
package main

import (
	"context"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(plugin{}) }

func main() {}

//go:wasmimport env sneaky
func sneaky() int32

type plugin struct{}

func (plugin) Info() sdk.Info { return sdk.Info{Name: "badimport"} }

func (plugin) Configure(map[string]any) (sdk.Config, error) { return nil, nil }

func (plugin) Decide(context.Context, sdk.Host, sdk.Config, sdk.Request) (sdk.Decision, error) {
	return sdk.Decision{Allowed: sneaky() == 1}, nil
}
