// Command hostile is a test plugin that misbehaves on request: its config's
// "mode" picks what Decide does.
package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/guest"
)

func init() { guest.Register(hostile{}) }

func main() {}

type hostile struct{}

type config struct{ mode string }

func (hostile) Info() sdk.Info {
	return sdk.Info{Name: "hostile", Version: "0.0.1", Scripts: []sdk.Script{
		{Name: "decide", Source: "return {1, 1, 10, 9, 1000000, 0}"},
		{Name: "big", Source: "return string.rep('x', tonumber(ARGV[1]))"},
	}}
}

func (hostile) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	mode := r.String("mode", "ok")
	if err := r.Done(); err != nil {
		return nil, err
	}
	if mode == "panic-in-configure" {
		panic("configure exploded")
	}
	return config{mode: mode}, nil
}

var (
	hog      [][]byte
	inDecide bool
)

func (hostile) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	if inDecide {
		return sdk.Decision{}, fmt.Errorf("instance entered twice")
	}
	inDecide = true
	defer func() { inDecide = false }()
	switch c.(config).mode {
	case "loop":
		for {
		}
	case "panic":
		panic("boom")
	case "oom":
		for {
			hog = append(hog, make([]byte, 1<<20))
		}
	case "exit":
		os.Exit(3)
	case "undeclared":
		_, err := h.Eval(ctx, "nope", []string{"k"})
		return sdk.Decision{}, err
	case "badptr":
		return sdk.Decision{}, badPointers()
	case "big":
		reply, err := h.Eval(ctx, "big", nil, 60000)
		if err != nil {
			return sdk.Decision{}, err
		}
		s, err := reply.Str()
		if err != nil {
			return sdk.Decision{}, err
		}
		return sdk.Decision{Allowed: true, Remaining: int64(len(s))}, nil
	case "logflood":
		for i := range 1000 {
			h.Log(sdk.LevelInfo, fmt.Sprintf("flood %d", i))
		}
	case "stdout":
		fmt.Println("hello from stdout")
		fmt.Fprintln(os.Stderr, strings.Repeat("e", 5000))
	case "slow":
		time.Sleep(50 * time.Millisecond) // sleeping returns at once in the sandbox
	}
	reply, err := h.Eval(ctx, "decide", []string{"k"}, r.Hits)
	if err != nil {
		return sdk.Decision{}, err
	}
	return sdk.DecisionFromReply(reply, time.Second)
}

//go:wasmimport ruled_v1 redis_eval
func rawEval(req, reqLen, out, outCap uint32) int64

//go:wasmimport ruled_v1 take_reply
func rawTake(out, outCap uint32) int64

//go:wasmimport ruled_v1 log
func rawLog(level int32, msg, n uint32)

// badPointers calls every import with arguments outside memory or otherwise
// wrong, and reports what the host answered.
func badPointers() error {
	buf := make([]byte, 4096)
	p := uint32(uintptr(unsafe.Pointer(&buf[0])))
	const far = 0xFFFFFF00
	rawLog(0, far, 100)
	got := []int64{
		rawEval(far, 100, p, 4096),      // request outside memory
		rawEval(p, 10, far, 4096),       // reply buffer outside memory
		rawEval(p, 0xFFFFFFFF, p, 4096), // length past the end
		rawEval(p, 0, p, 16),            // reply buffer too small
		rawEval(p, 3, p+100, 1000),      // garbage request: 0,0,0 is no valid field
		rawTake(p, 4096),                // no reply waiting
	}
	return fmt.Errorf("statuses %v", got)
}
