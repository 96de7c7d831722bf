// Package builtin lists the algorithms that ship with ruled. It is the one
// place that names them; the daemon links them natively.
package builtin

import (
	"maps"
	"slices"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugins/leaky"
	"github.com/ruled-dev/ruled/plugins/rolling"
	"github.com/ruled-dev/ruled/plugins/sortedset"
	"github.com/ruled-dev/ruled/plugins/tokenbucket"
	"github.com/ruled-dev/ruled/sdk"
)

// Model is the reference model of an algorithm: the decision its script
// makes, computed in Go from an explicit time in microseconds. A model is
// not safe for concurrent use unless its package says so.
type Model interface {
	Decide(nowUS int64, r sdk.Request) sdk.Decision
}

// NewModel returns a fresh reference model for cfg, a config a built-in's
// Configure returned, and false for any other config (a third-party
// plugin's, which ships no model).
func NewModel(cfg sdk.Config) (Model, bool) {
	switch c := cfg.(type) {
	case fixedwindow.Config:
		return fixedwindow.NewModel(c), true
	case rolling.Config:
		return rolling.NewModel(c), true
	case tokenbucket.Config:
		return tokenbucket.NewModel(c), true
	case leaky.Config:
		return leaky.NewModel(c), true
	case sortedset.Config:
		return sortedset.NewModel(c), true
	}
	return nil, false
}

// Has reports whether name is a built-in algorithm's name.
func Has(name string) bool {
	switch name {
	case fixedwindow.Name, rolling.Name, tokenbucket.Name, leaky.Name, sortedset.Name:
		return true
	}
	return false
}

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
	}
}
