package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// Buffer sizes. The guest's input buffer starts at minGuestBuf and doubles;
// host-side scratch buffers above maxKeptBuf are dropped after the call that
// needed them, so that one huge message does not pin memory.
const (
	minGuestBuf = 4096
	maxKeptBuf  = 64 << 10
	maxMessage  = 16 << 20
	maxDetail   = 512
)

// instance is one instantiated module. It is used by one goroutine at a time:
// the pool hands it out and takes it back.
type instance struct {
	p      *Plugin
	mod    api.Module
	mem    api.Memory
	linear *linearMemory // nil when wazero allocated the memory
	info   sdk.Info      // what ruled_init answered
	steps  bool          // and whether the module decides in steps

	fnBuf, fnInit, fnConfigure, fnDecide, fnStep api.Function

	stack          [2]uint64 // parameters and results of export calls
	bufPtr, bufCap uint32    // the guest buffer ruled_buf handed out
	enc            []byte    // encoded request to the guest
	reply          []byte    // encoded reply to redis_eval
	pending        []byte    // reply waiting for take_reply
	eval           abi.EvalRequest
	configured     map[uint64]struct{}
	stdout, stderr *lineWriter

	// State of the call in progress.
	host   sdk.Host // set during ruled_decide
	capErr error    // last capability error of the call
	detail string   // first error line the guest reported in the call
	broken bool     // a call failed: discard
	closed bool
}

// instanceKey carries the calling instance to the host functions.
type instanceKey struct{}

func callingInstance(ctx context.Context) *instance {
	in, _ := ctx.Value(instanceKey{}).(*instance)
	return in
}

// startTimeout bounds instantiation (the Go runtime's start-up and the
// package initializers) and ruled_init.
func startTimeout(call time.Duration) time.Duration { return max(10*call, 10*time.Second) }

// newInstance instantiates the module and calls ruled_init.
func (p *Plugin) newInstance(ctx context.Context) (*instance, error) {
	in := &instance{p: p, configured: map[uint64]struct{}{}}
	in.stdout = &lineWriter{in: in, stream: "stdout"}
	in.stderr = &lineWriter{in: in, stream: "stderr"}
	ctx, cancel := context.WithTimeout(ctx, startTimeout(p.opts.CallTimeout))
	defer cancel()
	ictx := experimental.WithMemoryAllocator(context.WithValue(ctx, instanceKey{}, in), memoryAllocator(&in.linear))
	mod, err := p.rt.InstantiateModule(ictx, p.code, p.mcfg.WithStdout(in.stdout).WithStderr(in.stderr))
	in.linear.exit() // _initialize has run
	if err != nil {
		in.flush()
		return nil, &CallError{Plugin: p.name(), Func: "_initialize", Err: err, Detail: in.detail}
	}
	in.mod, in.mem = mod, mod.Memory()
	in.fnBuf = mod.ExportedFunction(abi.ExportBuf)
	in.fnInit = mod.ExportedFunction(abi.ExportInit)
	in.fnConfigure = mod.ExportedFunction(abi.ExportConfigure)
	in.fnDecide = mod.ExportedFunction(abi.ExportDecide)
	in.fnStep = mod.ExportedFunction(abi.ExportStep)
	p.created.Add(1)

	in.begin(nil)
	defer in.end()
	in.enc = (&abi.InitRequest{ABIVersion: abi.Version}).Append(in.enc[:0])
	out, err := in.call(ctx, in.fnInit, abi.ExportInit, in.enc)
	if err == nil {
		if in.info, in.steps, err = abi.DecodeInfo(out); err != nil {
			err = in.fail(abi.ExportInit, err)
		} else if in.steps && in.fnStep == nil {
			err = in.fail(abi.ExportInit, fmt.Errorf("Info declares steps, but the module does not export %s", abi.ExportStep))
		}
	}
	if err != nil {
		in.close()
		return nil, err
	}
	return in, nil
}

func (p *Plugin) name() string {
	if p.info.Name != "" {
		return p.info.Name
	}
	return p.path
}

// begin starts a call; h is the capability during ruled_decide.
func (in *instance) begin(h sdk.Host) {
	in.linear.enter()
	in.host, in.capErr, in.detail, in.pending = h, nil, "", nil
}

// end finishes a call.
func (in *instance) end() {
	in.flush()
	if in.mem != nil && !in.broken {
		size := in.mem.Size()
		for cur := in.p.maxMemory.Load(); size > cur && !in.p.maxMemory.CompareAndSwap(cur, size); {
			cur = in.p.maxMemory.Load()
		}
	}
	in.host, in.capErr, in.pending = nil, nil, nil
	if cap(in.enc) > maxKeptBuf {
		in.enc = nil
	}
	if cap(in.reply) > maxKeptBuf {
		in.reply = nil
	}
	in.linear.exit() // after the last read of guest memory
}

func (in *instance) flush() {
	in.stdout.flush()
	in.stderr.flush()
}

// call writes msg into the guest's buffer, calls fn and returns a view of
// its answer in guest memory, valid until the next call. Any failure marks
// the instance broken.
func (in *instance) call(ctx context.Context, fn api.Function, name string, msg []byte) ([]byte, error) {
	if len(msg) > maxMessage {
		return nil, fmt.Errorf("wasm plugin %s: %s: message of %d bytes exceeds %d", in.p.name(), name, len(msg), maxMessage)
	}
	ctx = context.WithValue(ctx, instanceKey{}, in)
	if n := uint32(len(msg)); n > in.bufCap || in.bufPtr == 0 {
		size := max(n, 2*in.bufCap, minGuestBuf)
		in.stack[0] = uint64(size)
		if err := in.fnBuf.CallWithStack(ctx, in.stack[:1]); err != nil {
			return nil, in.fail(abi.ExportBuf, err)
		}
		ptr := uint32(in.stack[0])
		if _, ok := in.mem.Read(ptr, size); !ok || ptr == 0 {
			return nil, in.fail(abi.ExportBuf, fmt.Errorf("returned a %d-byte buffer at %#x, outside memory (%d bytes)", size, ptr, in.mem.Size()))
		}
		in.bufPtr, in.bufCap = ptr, size
	}
	in.mem.Write(in.bufPtr, msg) // in range: checked when the buffer was handed out
	in.stack[0], in.stack[1] = uint64(in.bufPtr), uint64(len(msg))
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return nil, in.fail(name, err)
	}
	packed := in.stack[0]
	if packed == 0 {
		return nil, in.fail(name, errors.New("the guest failed (returned 0)"))
	}
	ptr, n := abi.Unpack(packed)
	out, ok := in.mem.Read(ptr, n)
	if !ok {
		return nil, in.fail(name, fmt.Errorf("answer at %#x+%d lies outside memory (%d bytes)", ptr, n, in.mem.Size()))
	}
	return out, nil
}

// fail marks the instance broken and describes the failure.
func (in *instance) fail(fn string, err error) error {
	in.broken = true
	in.flush()
	return &CallError{Plugin: in.p.name(), Func: fn, Err: firstLine{err}, Detail: in.detail}
}

// firstLine shortens an error to its first line (wazero appends a Wasm
// stack trace to traps) and keeps it unwrappable.
type firstLine struct{ err error }

func (f firstLine) Error() string {
	s := f.err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func (f firstLine) Unwrap() error { return f.err }

// configure sends a ConfigureRequest and returns the guest's problems with
// it; the instance remembers configs it accepted.
func (in *instance) configure(ctx context.Context, id uint64, msg []byte) (abi.ConfigureResponse, error) {
	in.begin(nil)
	defer in.end()
	return in.configureInCall(ctx, id, msg)
}

func (in *instance) configureInCall(ctx context.Context, id uint64, msg []byte) (abi.ConfigureResponse, error) {
	out, err := in.call(ctx, in.fnConfigure, abi.ExportConfigure, msg)
	if err != nil {
		return abi.ConfigureResponse{}, err
	}
	var resp abi.ConfigureResponse
	if err := resp.Decode(out); err != nil {
		return abi.ConfigureResponse{}, in.fail(abi.ExportConfigure, err)
	}
	if len(resp.Errors) == 0 {
		in.configured[id] = struct{}{}
	}
	return resp, nil
}

// ensureConfigured replays config id if this instance has not seen it.
func (in *instance) ensureConfigured(ctx context.Context, id uint64) error {
	if _, ok := in.configured[id]; ok {
		return nil
	}
	msg, live := in.p.configMessage(id)
	if !live {
		return fmt.Errorf("wasm plugin %s: config %d is no longer in use", in.p.name(), id)
	}
	resp, err := in.configureInCall(ctx, id, msg)
	if err != nil {
		return err
	}
	if len(resp.Errors) > 0 {
		return fmt.Errorf("wasm plugin %s: a fresh instance refused a config accepted before: %s",
			in.p.name(), strings.Join(resp.Errors, "; "))
	}
	return nil
}

// step sends a StepRequest (its config replayed first if needed) and
// returns the guest's next step. The instance is not in a decision: the
// guest cannot call redis_eval.
func (in *instance) step(ctx context.Context, req *abi.StepRequest) (sdk.Step, error) {
	in.begin(nil)
	defer in.end()
	if err := in.ensureConfigured(ctx, req.ConfigID); err != nil {
		return sdk.Step{}, err
	}
	in.enc = req.Append(in.enc[:0])
	out, err := in.call(ctx, in.fnStep, abi.ExportStep, in.enc)
	if err != nil {
		return sdk.Step{}, err
	}
	var resp abi.StepResponse
	if err := resp.Decode(out); err != nil {
		return sdk.Step{}, in.fail(abi.ExportStep, err)
	}
	if err := abi.AnsweredError("wasm", in.p.name(), resp.Error, resp.BadRequest, nil); err != nil {
		return sdk.Step{}, err
	}
	return resp.Step(), nil
}

// decide replays the config if this instance has not seen it, then asks the
// guest to decide r.
func (in *instance) decide(ctx context.Context, h sdk.Host, id uint64, r *sdk.Request) (sdk.Decision, error) {
	in.begin(h)
	defer in.end()
	if err := in.ensureConfigured(ctx, id); err != nil {
		return sdk.Decision{}, err
	}
	req := abi.DecideRequest{ConfigID: id, Request: *r}
	in.enc = req.Append(in.enc[:0])
	out, err := in.call(ctx, in.fnDecide, abi.ExportDecide, in.enc)
	if err != nil {
		return sdk.Decision{}, err
	}
	var resp abi.DecideResponse
	if err := resp.Decode(out); err != nil {
		return sdk.Decision{}, in.fail(abi.ExportDecide, err)
	}
	if err := abi.AnsweredError("wasm", in.p.name(), resp.Error, resp.BadRequest, in.capErr); err != nil {
		return sdk.Decision{}, err
	}
	return resp.Decision, nil
}

// stale reports whether the instance holds many configs the engine no
// longer uses (dynamic configs come and go); such instances are recycled.
func (in *instance) stale() bool {
	n := len(in.configured)
	return n > 64 && n > 2*in.p.liveConfigs()
}

func (in *instance) close() {
	if in.closed {
		return
	}
	in.closed = true
	// Closing a module only releases resources; it cannot fail in a way
	// that matters here, and the context only matters to listeners.
	_ = in.mod.Close(context.Background())
	in.p.closedInstances.Add(1)
}
