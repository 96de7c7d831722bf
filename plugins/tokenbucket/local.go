package tokenbucket

import (
	"fmt"

	"github.com/ruled-dev/ruled/sdk"
)

// NewLocal implements sdk.LocalAlgorithm: the model with the quota scaled to
// this instance's share, for on_error: local.
func (Plugin) NewLocal(cfg sdk.Config, share float64) (sdk.LocalLimiter, error) {
	c, ok := cfg.(Config)
	if !ok {
		return nil, fmt.Errorf("tokenbucket: config of type %T", cfg)
	}
	c.Rate = sdk.ScaleLimit(c.Rate, share)
	c.Burst = sdk.ScaleLimit(c.Burst, share)
	return NewModel(c), nil
}

var _ sdk.LocalAlgorithm = Plugin{}
