package guest

import (
	"testing"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

type cannedImports struct{ reply []byte }

func (c cannedImports) redisEval(req, out []byte) int64 { return int64(copy(out, c.reply)) }
func (c cannedImports) takeReply(out []byte) int64       { return 0 }
func (c cannedImports) log(sdk.Level, string)            {}

func TestTmpAllocs(t *testing.T) {
	g := newGlue(t, fixedwindow.New(), nil)
	g.configure(1, map[string]any{"limit": 1 << 40, "window": "1h"})
	imp := cannedImports{reply: abi.AppendReply(nil, sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3600e6, 0))}
	g.m.imp, g.m.host.imp = imp, imp
	msg := (&abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "bench-subject", Hits: 1}}).Append(nil)
	n := testing.AllocsPerRun(100, func() {
		buf := g.m.buffer(len(msg))
		k := copy(buf, msg)
		g.m.export("d", buf[:k], (*module).decide)
	})
	t.Log("allocs", n)
}
