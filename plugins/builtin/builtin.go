// Package builtin lists the algorithms that ship with ruled. It is the one
// place that names them; the daemon links them natively.
package builtin

import (
	"maps"
	"slices"

	"github.com/ruled-dev/ruled/plugins/concurrency"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/sdk"
)

// Catalog resolves algorithms by name for loading rules without a Redis
// (rules.Catalog, and rules.NameLister for "did you mean" suggestions). It
// is a map, so that a caller may add algorithms to it.
type Catalog map[string]sdk.Algorithm

// NewCatalog returns a catalog of fresh instances of the built-ins.
func NewCatalog() Catalog {
	c := Catalog{}
	for _, alg := range All() {
		c[alg.Info().Name] = alg
	}
	return c
}

// Lookup implements rules.Catalog.
func (c Catalog) Lookup(name string) (sdk.Algorithm, bool) {
	alg, ok := c[name]
	return alg, ok
}

// Names implements rules.NameLister.
func (c Catalog) Names() []string { return slices.Collect(maps.Keys(c)) }

// All returns a fresh instance of every built-in algorithm.
func All() []sdk.Algorithm {
	return []sdk.Algorithm{
		fixedwindow.New(),
		rolling.New(),
		tokenbucket.New(),
		leaky.New(),
		sortedset.New(),
		concurrency.New(),
	}
}
