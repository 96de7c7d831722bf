// Command faulty is a process plugin for host/process's tests: a counter
// that misbehaves on request, through the request's "fault" attribute.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/process"
)

type counter struct{}

func (counter) Info() sdk.Info {
	return sdk.Info{Name: "faulty", Version: "0.1.0", Scripts: []sdk.Script{{
		Name:     "incr",
		Source:   `local n = redis.call('INCRBY', KEYS[1], ARGV[1]) redis.call('PEXPIRE', KEYS[1], 60000) return {n, ARGV[2], tonumber(ARGV[3]) * 2}`,
		Commands: []string{"INCRBY", "PEXPIRE"},
	}}}
}

type config struct{ limit int64 }

func (counter) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := config{limit: r.RequireInt("limit")}
	if r.Bool("panic", false) {
		panic("configure asked to panic")
	}
	r.Check(c.limit > 0, "limit", "must be at least 1")
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

func (counter) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, r sdk.Request) (sdk.Decision, error) {
	c := cfg.(config)
	switch r.Attrs["fault"] {
	case "exit":
		os.Exit(3)
	case "hang": // ignores its deadline
		time.Sleep(time.Hour)
	case "panic":
		panic("decide asked to panic")
	case "error":
		return sdk.Decision{}, errors.New("asked to fail")
	case "log":
		h.Log(sdk.LevelWarn, "hello from the plugin")
		fmt.Fprintln(os.Stderr, "a line on stderr")
	case "late-eval": // Eval after Decide has returned must be refused
		done := make(chan error, 1)
		go func() {
			time.Sleep(50 * time.Millisecond)
			_, err := h.Eval(context.Background(), "incr", []string{"n"}, 1, "x", 1)
			done <- err
		}()
		h.Log(sdk.LevelInfo, "late eval started")
		go func() { h.Log(sdk.LevelWarn, fmt.Sprintf("late eval: %v", <-done)) }()
	case "args":
		reply, err := h.Eval(ctx, "incr", []string{"n"}, int64(1), []byte("bytes\x00\xff"), 21*time.Nanosecond)
		if err != nil {
			return sdk.Decision{}, err
		}
		v, err := reply.Array()
		if err != nil || len(v) != 3 {
			return sdk.Decision{}, fmt.Errorf("reply %v: %v", reply, err)
		}
		if s, _ := v[1].Str(); s != "bytes\x00\xff" {
			return sdk.Decision{}, fmt.Errorf("string argument came back as %q", s)
		}
		if n, _ := v[2].Int64(); n != 42 {
			return sdk.Decision{}, fmt.Errorf("duration argument came back as %d", n)
		}
	case "undeclared":
		_, err := h.Eval(ctx, "nope", []string{"n"})
		return sdk.Decision{}, err
	}
	reply, err := h.Eval(ctx, "incr", []string{"n"}, r.Hits, r.DedupID, 0)
	if err != nil {
		return sdk.Decision{}, err
	}
	v, err := reply.Array()
	if err != nil {
		return sdk.Decision{}, err
	}
	n, err := v[0].Int64()
	if err != nil {
		return sdk.Decision{}, err
	}
	return sdk.Decision{Allowed: n <= c.limit, Granted: r.Hits, Limit: c.limit, Remaining: max(c.limit-n, 0),
		Window: time.Minute, Reset: 1500 * time.Microsecond}, nil
}

// stepping is counter deciding in steps (when RULED_TEST_STEPS=1): the
// faults that end the process or hang it happen in Start, and the count
// comes back to Resume.
type stepping struct{ counter }

func (stepping) Start(_ context.Context, _ sdk.Config, r sdk.Request) (sdk.Step, error) {
	switch r.Attrs["fault"] {
	case "exit":
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour)
	case "error":
		return sdk.Step{}, errors.New("asked to fail")
	}
	return sdk.Run("incr", []string{"n"}, r.Hits, r.DedupID, 0), nil
}

func (stepping) Resume(_ context.Context, cfg sdk.Config, r sdk.Request, _ sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	c := cfg.(config)
	v, err := reply.Array()
	if err != nil {
		return sdk.Step{}, err
	}
	n, err := v[0].Int64()
	if err != nil {
		return sdk.Step{}, err
	}
	return sdk.Done(sdk.Decision{Allowed: n <= c.limit, Granted: r.Hits, Limit: c.limit, Remaining: max(c.limit-n, 0),
		Window: time.Minute, Reset: 1500 * time.Microsecond}), nil
}

func main() {
	switch os.Getenv("RULED_TEST_STEPS") {
	case "1":
		process.Serve(stepping{})
	case "nohello":
		hideStepsSocket()
		process.Serve(stepping{})
	default:
		process.Serve(counter{})
	}
}
