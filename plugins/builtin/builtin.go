// Package builtin lists the algorithms that ship with ruled. It is the one
// place that names them; the daemon links them natively.
package builtin

import (
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/sdk"
)

// All returns a fresh instance of every built-in algorithm.
func All() []sdk.Algorithm {
	return []sdk.Algorithm{
		fixedwindow.New(),
		rolling.New(),
		tokenbucket.New(),
		leaky.New(),
		sortedset.New(),
	}
}
