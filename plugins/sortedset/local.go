package sortedset

import (
	"fmt"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// NewLocal implements sdk.LocalAlgorithm: the model with the quota scaled to
// this instance's share, for on_error: local. A rate of limit 0 stays a block.
func (Plugin) NewLocal(cfg sdk.Config, share float64) (sdk.LocalLimiter, error) {
	c, ok := cfg.(Config)
	if !ok {
		return nil, fmt.Errorf("sortedset: config of type %T", cfg)
	}
	c.Limit = sdk.ScaleLimit(c.Limit, share)
	also := make([]Rate, len(c.Also))
	for i, r := range c.Also {
		also[i] = Rate{Limit: sdk.ScaleLimit(r.Limit, share), Window: r.Window}
	}
	c.Also = also
	if share > 0 && share < 1 {
		// N instances each keeping the gap would admit N actions per gap.
		c.MinGap = time.Duration(float64(c.MinGap) / share)
	}
	return NewModel(c), nil
}

var _ sdk.LocalAlgorithm = Plugin{}
