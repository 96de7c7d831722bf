package fixedwindow

import (
	"fmt"

	"github.com/ruled-dev/ruled/sdk"
)

// NewLocal implements sdk.LocalAlgorithm: the model with the limit scaled to
// this instance's share, counting in the same windows or calendar periods.
// A block (limit 0) stays a block.
func (Plugin) NewLocal(cfg sdk.Config, share float64) (sdk.LocalLimiter, error) {
	c, ok := cfg.(Config)
	if !ok {
		return nil, fmt.Errorf("fixedwindow: config of type %T", cfg)
	}
	c.Limit = sdk.ScaleLimit(c.Limit, share)
	return NewModel(c), nil
}

var _ sdk.LocalAlgorithm = Plugin{}
