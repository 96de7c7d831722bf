// Package guest turns an sdk.Algorithm into a ruled Wasm plugin: a WASI
// reactor module that speaks ABI v1 (docs/abi.md).
//
// A plugin's main package registers its algorithm from an init function,
// because a reactor's main never runs:
//
//	package main
//
//	import (
//		"example.com/myplugin"
//		"github.com/ruled-dev/ruled/sdk/guest"
//	)
//
//	func init() { guest.Register(myplugin.New()) }
//
//	func main() {}
//
// and is built with
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o myplugin.wasm .
//
// or `ruled plugin build DIR -o myplugin.wasm`. The exports and imports exist
// only in that build; on other platforms Register only records the
// algorithm, so that the package still compiles and vets everywhere.
//
// Inside the module, Decide gets an sdk.Host whose Eval goes through the
// host's redis_eval import (the same capability native plugins use: declared
// scripts only, namespaced keys, time-outs) and whose Log writes to the
// daemon's log. Every export recovers from panics; a panic fails the call and
// the host discards the instance. The context Decide receives carries no
// deadline: the host enforces one from outside.
package guest

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// registered is the module's one algorithm and its state. It is the only
// global state of the glue; a Wasm instance runs one call at a time.
var registered *module

// Register makes alg the module's algorithm. Call it exactly once, from an
// init function of the plugin's main package. It panics when alg is nil or
// when an algorithm is already registered.
func Register(alg sdk.Algorithm) {
	if alg == nil {
		panic("guest: Register(nil)")
	}
	if registered != nil {
		panic("guest: Register called twice")
	}
	registered = newModule(alg, platformImports())
}

// imports are the host functions of module ruled_v1, as the core uses them.
type imports interface {
	// redisEval passes an encoded EvalRequest and a reply buffer, and
	// returns the reply's length, a status, or minus the needed length.
	redisEval(req, out []byte) int64
	// takeReply copies a reply that did not fit into out.
	takeReply(out []byte) int64
	// log writes msg at level.
	log(level sdk.Level, msg string)
}

// initialReplyCap is the reply buffer's starting size; replies larger than
// maxKeptCap are received in a temporary buffer.
const (
	initialReplyCap = 4096
	maxKeptCap      = 64 << 10
)

// module is the host-independent core of the glue: it decodes the host's
// messages, calls the algorithm and encodes its answers.
type module struct {
	alg     sdk.Algorithm
	stepper sdk.Stepper // alg when it decides in steps, else nil
	imp     imports
	host    *host
	configs map[uint64]sdk.Config
	lastID  uint64     // the config of the last decision, to skip the map
	lastCfg sdk.Config // (function calls are expensive inside Wasm)

	stepReq  abi.StepRequest // reused by every step
	stepResp abi.StepResponse

	in  []byte // the buffer ruled_buf hands out
	out []byte // the last export's answer; capacity never 0
}

func newModule(alg sdk.Algorithm, imp imports) *module {
	m := &module{alg: alg, imp: imp, configs: map[uint64]sdk.Config{}, out: make([]byte, 0, 256)}
	m.stepper, _ = alg.(sdk.Stepper)
	m.host = &host{imp: imp, reply: make([]byte, initialReplyCap)}
	return m
}

// buffer returns the input buffer with room for at least size bytes,
// allocating a new one when the current one is too small.
func (m *module) buffer(size int) []byte {
	if cap(m.in) < size || cap(m.in) == 0 {
		m.in = make([]byte, max(size, 1024))
	}
	return m.in[:cap(m.in)]
}

// export runs one export's handler on in and returns its answer, or false
// when the handler failed or panicked (the host then discards the instance).
func (m *module) export(name string, in []byte, handle func(*module, []byte) ([]byte, error)) (out []byte, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			m.logf(sdk.LevelError, "%s: panic: %v\n%s", name, v, debug.Stack())
			out, ok = nil, false
		}
	}()
	out, err := handle(m, in)
	if err != nil {
		m.logf(sdk.LevelError, "%s: %v", name, err)
		return nil, false
	}
	m.out = out
	return out, true
}

func (m *module) logf(level sdk.Level, format string, args ...any) {
	if m.imp != nil {
		m.imp.log(level, fmt.Sprintf(format, args...))
	}
}

// initialize answers ruled_init with the algorithm's Info.
func (m *module) initialize(in []byte) ([]byte, error) {
	var req abi.InitRequest
	if err := req.Decode(in); err != nil {
		return nil, err
	}
	if req.ABIVersion != abi.Version {
		return nil, fmt.Errorf("host speaks ABI %d, this module ABI %d", req.ABIVersion, abi.Version)
	}
	info := m.alg.Info()
	return abi.AppendInfo(m.out[:0], &info, m.stepper != nil), nil
}

// configure answers ruled_configure: the config is validated and kept under
// its id, or the answer carries the algorithm's error.
func (m *module) configure(in []byte) ([]byte, error) {
	var req abi.ConfigureRequest
	if err := req.Decode(in); err != nil {
		return nil, err
	}
	var resp abi.ConfigureResponse
	cfg, err := m.alg.Configure(req.Config)
	if err != nil {
		resp.Errors = leaves(err, resp.Errors)
		return resp.Append(m.out[:0])
	}
	if t, ok := m.alg.(sdk.Templater); ok {
		if tmpl, ok := t.Template(cfg); ok {
			if err := sdk.CheckTemplate(tmpl); err != nil {
				return nil, fmt.Errorf("%T.Template: %w", m.alg, err)
			}
			resp.Template = &tmpl
		}
	}
	m.configs[req.ConfigID] = cfg
	if req.ConfigID == m.lastID {
		m.lastID = 0
	}
	return resp.Append(m.out[:0])
}

// leaves appends the messages of the leaves of an errors.Join tree, so that
// the host can report each problem where it belongs.
func leaves(err error, out []string) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil {
				out = leaves(e, out)
			}
		}
		return out
	}
	return append(out, err.Error())
}

// decide answers ruled_decide.
func (m *module) decide(in []byte) ([]byte, error) {
	var req abi.DecideRequest
	if err := req.Decode(in); err != nil {
		return nil, err
	}
	var resp abi.DecideResponse
	cfg, ok := m.config(req.ConfigID)
	if !ok {
		resp.Error = fmt.Sprintf("guest: unknown config id %d", req.ConfigID)
		return resp.Append(m.out[:0]), nil
	}
	m.host.active = true
	d, err := m.alg.Decide(context.Background(), m.host, cfg, req.Request)
	m.host.active = false
	if err != nil {
		resp.Error, resp.BadRequest = abi.DecideError(err)
	} else {
		resp.Decision = d
	}
	return resp.Append(m.out[:0]), nil
}

// config returns the config kept under id.
func (m *module) config(id uint64) (sdk.Config, bool) {
	if id == m.lastID && id != 0 {
		return m.lastCfg, true
	}
	cfg, ok := m.configs[id]
	if ok {
		m.lastID, m.lastCfg = id, cfg
	}
	return cfg, ok
}

// step answers ruled_step: the algorithm's Start, or its Resume with the
// reply of the step's call.
func (m *module) step(in []byte) ([]byte, error) {
	if m.stepper == nil {
		return nil, fmt.Errorf("%T does not decide in steps (Info did not declare steps)", m.alg)
	}
	req := &m.stepReq
	if err := req.Decode(in); err != nil {
		return nil, err
	}
	resp := &m.stepResp
	*resp = abi.StepResponse{} // its slices are the plugin's: never reused
	cfg, ok := m.config(req.ConfigID)
	if !ok {
		resp.Error = fmt.Sprintf("guest: unknown config id %d", req.ConfigID)
		return resp.Append(m.out[:0])
	}
	s, err := sdk.NextStep(context.Background(), m.stepper, cfg, req.Request, req.Prev(), req.Reply)
	resp.SetStep(s, err)
	out, err := resp.Append(m.out[:0])
	if err != nil {
		// An argument that cannot cross: the decision fails, as Eval
		// with it would have.
		*resp = abi.StepResponse{}
		resp.Error = fmt.Sprintf("guest: step call %s: %v", s.Script, err)
		return resp.Append(m.out[:0])
	}
	return out, nil
}

// host is the sdk.Host a guest's Decide receives.
type host struct {
	imp    imports
	active bool   // inside ruled_decide
	req    []byte // encoded EvalRequest, reused
	reply  []byte // reply buffer, at least abi.MinReplyCap
}

// Eval implements sdk.Host through the redis_eval import.
func (h *host) Eval(ctx context.Context, script string, keys []string, args ...any) (sdk.Reply, error) {
	if err := ctx.Err(); err != nil {
		return sdk.Reply{}, err
	}
	if !h.active {
		return sdk.Reply{}, fmt.Errorf("guest: Eval %s outside Decide", script)
	}
	msg := abi.EvalRequest{Script: script, Keys: keys, Args: args}
	req, err := msg.Append(h.req[:0])
	if err != nil {
		return sdk.Reply{}, fmt.Errorf("guest: Eval %s: %w", script, err)
	}
	h.req = req
	buf := h.reply
	n := h.imp.redisEval(req, buf)
	if n < 0 && !abi.IsStatus(n) {
		buf = make([]byte, -n)
		if -n <= maxKeptCap {
			h.reply = buf
		}
		n = h.imp.takeReply(buf)
	}
	if n < 0 {
		return sdk.Reply{}, fmt.Errorf("guest: Eval %s: redis_eval: %v", script, abi.Status(n))
	}
	if n > int64(len(buf)) {
		return sdk.Reply{}, fmt.Errorf("guest: Eval %s: redis_eval returned %d bytes for a %d-byte buffer", script, n, len(buf))
	}
	return abi.DecodeReply(buf[:n])
}

// Log implements sdk.Host through the log import.
func (h *host) Log(level sdk.Level, msg string) {
	if h.imp != nil {
		h.imp.log(level, msg)
	}
}
