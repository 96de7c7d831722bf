//go:build !unix

package process

import (
	"net"
	"os"
)

// stepsChildFD is unused: no socket is offered.
const stepsChildFD = 0

// stepsSocket offers no steps socket where there are no socket pairs to
// pass to a child: plugins that decide in steps are asked through Decide.
func stepsSocket() (net.Conn, *os.File, error) { return nil, nil, nil }
