package concurrency

import (
	"fmt"

	"github.com/ruled-dev/ruled/sdk"
)

// NewLocal implements sdk.LocalAlgorithm: the model with the limit scaled
// to this instance's share, for on_error: local. Leases taken locally are
// released locally; a release of one taken in Redis frees nothing here.
func (Plugin) NewLocal(cfg sdk.Config, share float64) (sdk.LocalLimiter, error) {
	c, ok := cfg.(Config)
	if !ok {
		return nil, fmt.Errorf("concurrency: config of type %T", cfg)
	}
	c.Limit = sdk.ScaleLimit(c.Limit, share)
	return NewModel(c), nil
}

var _ sdk.LocalAlgorithm = Plugin{}
