package assemblyscript_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// rawModule is the module instantiated directly in wazero with a stand-in for ruled_v1, so that
// tests can call its exports with bytes the driver never sends.
type rawModule struct {
	t                            testing.TB
	mod                          api.Module
	buf, init, configure, decide api.Function

	reply   []byte   // what redis_eval answers
	pending []byte   // a reply waiting for take_reply
	evals   [][]byte // EvalRequests received
	logs    []string
}

func newRawModule(t testing.TB) *rawModule {
	t.Helper()
	ctx := context.Background()
	bin, err := os.ReadFile(asModule)
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(1024))
	t.Cleanup(func() { _ = rt.Close(ctx) })
	m := &rawModule{t: t}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	_, err = rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(m.redisEval), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64}).Export(abi.ImportRedisEval).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(m.takeReply), []api.ValueType{i32, i32}, []api.ValueType{i64}).Export(abi.ImportTakeReply).
		NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(m.log), []api.ValueType{i32, i32, i32}, nil).Export(abi.ImportLog).
		Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := rt.InstantiateWithConfig(ctx, bin, wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
	if err != nil {
		t.Fatal(err)
	}
	m.mod = mod
	m.buf, m.init = mod.ExportedFunction(abi.ExportBuf), mod.ExportedFunction(abi.ExportInit)
	m.configure, m.decide = mod.ExportedFunction(abi.ExportConfigure), mod.ExportedFunction(abi.ExportDecide)
	return m
}

func (m *rawModule) redisEval(_ context.Context, mod api.Module, stack []uint64) {
	req, ok := mod.Memory().Read(uint32(stack[0]), uint32(stack[1]))
	if !ok {
		m.t.Fatalf("redis_eval: request outside memory")
	}
	m.evals = append(m.evals, slices.Clone(req))
	out, outCap := uint32(stack[2]), uint32(stack[3])
	if outCap < abi.MinReplyCap {
		m.t.Fatalf("redis_eval: reply buffer of %d bytes", outCap)
	}
	if len(m.reply) > int(outCap) {
		m.pending = m.reply
		stack[0] = uint64(-int64(len(m.reply)))
		return
	}
	mod.Memory().Write(out, m.reply)
	stack[0] = uint64(len(m.reply))
}

func (m *rawModule) takeReply(_ context.Context, mod api.Module, stack []uint64) {
	if m.pending == nil || len(m.pending) > int(uint32(stack[1])) {
		m.t.Fatalf("take_reply with %d bytes pending, cap %d", len(m.pending), uint32(stack[1]))
	}
	mod.Memory().Write(uint32(stack[0]), m.pending)
	stack[0], m.pending = uint64(len(m.pending)), nil
}

func (m *rawModule) log(_ context.Context, mod api.Module, stack []uint64) {
	msg, _ := mod.Memory().Read(uint32(stack[1]), uint32(stack[2]))
	m.logs = append(m.logs, fmt.Sprintf("%d %s", int32(stack[0]), msg))
}

// call passes msg to fn the way the host does and returns the answer, or ok false when the export
// answered 0. Traps fail the test: the module must never trap on any input.
func (m *rawModule) call(fn api.Function, msg []byte) (answer []byte, ok bool) {
	m.t.Helper()
	ptr := m.buffer(uint32(max(len(msg), 4096)))
	m.mod.Memory().Write(ptr, msg)
	return m.callAt(fn, ptr, uint32(len(msg)))
}

func (m *rawModule) callAt(fn api.Function, ptr, n uint32) (answer []byte, ok bool) {
	m.t.Helper()
	res, err := fn.Call(context.Background(), uint64(ptr), uint64(n))
	if err != nil {
		m.t.Fatalf("%s trapped: %v (log %q)", fn.Definition().Name(), err, m.logs)
	}
	if res[0] == 0 {
		return nil, false
	}
	p, l := abi.Unpack(res[0])
	out, inMem := m.mod.Memory().Read(p, l)
	if !inMem {
		m.t.Fatalf("%s: answer %#x+%d outside memory", fn.Definition().Name(), p, l)
	}
	return slices.Clone(out), true
}

func (m *rawModule) buffer(size uint32) uint32 {
	m.t.Helper()
	res, err := m.buf.Call(context.Background(), uint64(size))
	if err != nil || res[0] == 0 {
		m.t.Fatalf("ruled_buf(%d): %v %v", size, res, err)
	}
	return uint32(res[0])
}

// mustDecide decides a request for config 1 (limit 10, window 1s) against a canned reply and
// checks the answer: the module still works.
func (m *rawModule) mustDecide() {
	m.t.Helper()
	m.reply = abi.AppendReply(nil, sdk.IntsReply(1, 2, 10, 8, 1_000_000, 0))
	out, ok := m.call(m.decide, (&abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "s", Hits: 2}}).Append(nil))
	var resp abi.DecideResponse
	if !ok || resp.Decode(out) != nil || resp.Error != "" ||
		resp.Decision != (sdk.Decision{Allowed: true, Granted: 2, Limit: 10, Remaining: 8, Window: time.Second, Reset: time.Second}) {
		m.t.Fatalf("the module no longer decides: %v %+v (log %q)", ok, resp, m.logs)
	}
}

func configureMsg(t testing.TB, id uint64, raw map[string]any) []byte {
	t.Helper()
	b, err := (&abi.ConfigureRequest{ConfigID: id, Config: raw}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (m *rawModule) mustConfigure(id uint64, raw map[string]any) {
	m.t.Helper()
	out, ok := m.call(m.configure, configureMsg(m.t, id, raw))
	var resp abi.ConfigureResponse
	if !ok || resp.Decode(out) != nil || len(resp.Errors) > 0 {
		m.t.Fatalf("configure %v: %v %q (log %q)", raw, ok, resp.Errors, m.logs)
	}
}

// Wire building blocks for hand-made messages.
func tag(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
func cat(parts ...[]byte) []byte                          { return slices.Concat(parts...) }
func varint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(tag(num, protowire.VarintType), v)
}
func lenField(num protowire.Number, body []byte) []byte {
	return protowire.AppendBytes(tag(num, protowire.BytesType), body)
}

// unknownFields are fields of every wire type that no ABI v1 message has: readers skip them.
var unknownFields = cat(
	varint(15, 1<<63),
	protowire.AppendFixed64(tag(14, protowire.Fixed64Type), 7),
	protowire.AppendFixed32(tag(13, protowire.Fixed32Type), 7),
	lenField(12, []byte("skip me")),
	tag(11, protowire.StartGroupType), varint(1, 5), tag(2, protowire.StartGroupType), tag(2, protowire.EndGroupType),
	tag(11, protowire.EndGroupType),
	varint(1<<29-1, 1), // the largest field number
)

// nestedLists is a Value of lists nested depth deep.
func nestedLists(depth int) []byte {
	v := varint(2, 2) // int_value 1
	for range depth {
		v = lenField(8, lenField(1, v))
	}
	return v
}

// TestABIEdges calls the exports with what the host never sends: malformed messages, messages
// outside the input buffer, unknown fields, a wrong ABI version. Malformed input fails the call
// (answer 0) and leaves the module working; unknown fields are skipped.
func TestABIEdges(t *testing.T) {
	m := newRawModule(t)
	initReq := (&abi.InitRequest{ABIVersion: 1}).Append(nil)
	out, ok := m.call(m.init, cat(unknownFields, initReq, unknownFields))
	info, steps, err := abi.DecodeInfo(out)
	native := fixedwindow.New().Info()
	if !ok || err != nil || info.Name != "fixedwindow-as" || fmt.Sprint(info.Scripts) != fmt.Sprint(native.Scripts[:1]) || steps {
		t.Fatalf("ruled_init: %v %+v %v", ok, info, err)
	}
	if _, ok := m.call(m.init, (&abi.InitRequest{ABIVersion: 2}).Append(nil)); ok {
		t.Errorf("ruled_init accepted ABI version 2")
	}
	if _, ok := m.call(m.init, nil); ok {
		t.Errorf("ruled_init accepted no ABI version")
	}

	// Unknown fields at every level of a config; the last config field wins.
	entry := func(k string, v []byte) []byte {
		return lenField(1, cat(lenField(1, []byte(k)), unknownFields, lenField(2, v)))
	}
	cfg := cat(unknownFields,
		entry("limit", cat(varint(2, 1), unknownFields, varint(2, 20))), // int 10
		entry("window", cat(lenField(5, []byte("1s")), unknownFields)))
	out, ok = m.call(m.configure, cat(varint(1, 1), lenField(2, entry("limit", varint(2, 0))), lenField(2, cfg)))
	var cresp abi.ConfigureResponse
	if !ok || cresp.Decode(out) != nil || len(cresp.Errors) != 0 {
		t.Fatalf("configure with unknown fields: %v %q (log %q)", ok, cresp.Errors, m.logs)
	}
	m.reply = cat(abi.AppendReply(nil, sdk.IntsReply(1, 2, 10, 8, 1_000_000, 0)), unknownFields)
	req := (&abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "s", Hits: 2, DedupID: "d", Attrs: map[string]string{"a": "b"}}}).Append(nil)
	out, ok = m.call(m.decide, cat(unknownFields, req, unknownFields))
	var dresp abi.DecideResponse
	if !ok || dresp.Decode(out) != nil || dresp.Error != "" || dresp.Decision.Granted != 2 {
		t.Fatalf("decide with unknown fields: %v %+v (log %q)", ok, dresp, m.logs)
	}
	var eval abi.EvalRequest
	if err := eval.Decode(m.evals[len(m.evals)-1]); err != nil ||
		fmt.Sprint(eval.Script, eval.Keys, eval.Args) != fmt.Sprint("decide", []string{"c", "d"}, []any{int64(10), int64(1_000_000), int64(0), int64(2), "d", int64(0)}) {
		t.Fatalf("EvalRequest %+v %v", eval, err)
	}

	// An unknown config is an error of the decision, not of the module.
	out, ok = m.call(m.decide, (&abi.DecideRequest{ConfigID: 99}).Append(nil))
	if !ok || dresp.Decode(out) != nil || dresp.Error != "unknown config id 99" {
		t.Fatalf("unknown config: %v %+v", ok, dresp)
	}

	// Malformed at the wire level: every export refuses them.
	malformed := map[string][]byte{
		"truncated varint":          {0x08, 0x80},
		"11-byte varint":            cat([]byte{0x08}, []byte(strings.Repeat("\xff", 10)), []byte{0}),
		"10th varint byte above 1":  cat([]byte{0x08}, []byte(strings.Repeat("\xff", 9)), []byte{2}),
		"length beyond the end":     {0x12, 0x05, 'a'},
		"length beyond 4 GiB":       cat([]byte{0x12}, protowire.AppendVarint(nil, 1<<40)),
		"field number 0":            {0x00, 0x01},
		"field number above 2^31-1": protowire.AppendVarint(nil, uint64(1)<<34),
		"end group without start":   tag(3, protowire.EndGroupType),
		"mismatched end group":      cat(tag(3, protowire.StartGroupType), tag(4, protowire.EndGroupType)),
		"unterminated group":        tag(3, protowire.StartGroupType),
		"wire type 6":               {0x0e},
		"wire type 7":               {0x0f},
		"truncated fixed64":         {0x09, 1, 2, 3},
		"truncated fixed32":         {0x0d, 1, 2, 3},
	}
	// Malformed inside a field that one message decodes.
	decideOnly := map[string][]byte{
		"malformed attrs": lenField(6, []byte{0x0a, 0x09}),
	}
	configureOnly := map[string][]byte{
		"malformed config value":   cat(varint(1, 3), lenField(2, entry("limit", []byte{0x10}))),
		"malformed nested value":   cat(varint(1, 3), lenField(2, entry("x", lenField(8, lenField(1, []byte{0x2a, 0x01}))))),
		"config nested too deeply": cat(varint(1, 3), lenField(2, entry("limit", nestedLists(64)))),
		"malformed map entry":      cat(varint(1, 3), lenField(2, lenField(1, []byte{0x0a}))),
	}
	exports := map[string]api.Function{abi.ExportInit: m.init, abi.ExportConfigure: m.configure, abi.ExportDecide: m.decide}
	refuse := func(name string, msg []byte, fns ...string) {
		t.Helper()
		for _, fn := range fns {
			logs := len(m.logs)
			if _, ok := m.call(exports[fn], msg); ok {
				t.Errorf("%s accepted %s: % x", fn, name, msg)
			} else if len(m.logs) == logs || !strings.HasPrefix(m.logs[len(m.logs)-1], "8 "+fn+": malformed") {
				t.Errorf("%s refused %s without saying why: %q", fn, name, m.logs[logs:])
			}
			m.mustDecide()
		}
	}
	for name, msg := range malformed {
		refuse(name, msg, abi.ExportInit, abi.ExportConfigure, abi.ExportDecide)
	}
	for name, msg := range decideOnly {
		refuse(name, msg, abi.ExportDecide)
	}
	for name, msg := range configureOnly {
		refuse(name, msg, abi.ExportConfigure)
	}
	// Config values nest up to 64 deep, as in sdk/abi.
	out, ok = m.call(m.configure, cat(varint(1, 3), lenField(2, entry("limit", nestedLists(63)))))
	if !ok || cresp.Decode(out) != nil || len(cresp.Errors) != 2 || !strings.HasPrefix(cresp.Errors[0], "limit: want a whole number, got [[[[") {
		t.Errorf("configure nested 63 deep: %v %q", ok, cresp.Errors)
	}

	// Messages must lie in the buffer ruled_buf handed out.
	ptr := m.buffer(4096)
	if _, ok := m.callAt(m.decide, ptr+1, 10); ok {
		t.Errorf("ruled_decide accepted a message outside its buffer")
	}
	if _, ok := m.callAt(m.decide, ptr, 1<<20); ok {
		t.Errorf("ruled_decide accepted a message longer than its buffer")
	}
	if res, err := m.buf.Call(context.Background(), 1<<30); err != nil || res[0] != 0 {
		t.Errorf("ruled_buf(1 GiB) = %v, %v; want 0", res, err)
	}
	if big := m.buffer(1 << 20); big == ptr {
		t.Errorf("ruled_buf(1 MiB) returned the 4 KiB buffer")
	}
	m.mustDecide()
}

// TestDecodersAgreeWithSDK feeds mutations of valid messages to the module and to sdk/abi's
// decoders (what the Go guest runs): the module must fail exactly the calls sdk/abi cannot decode,
// send the EvalRequest the Go plugin would send, answer config problems as the native plugin
// does, and decide from replies as sdk.DecisionFromReply does.
func TestDecodersAgreeWithSDK(t *testing.T) {
	m := newRawModule(t)
	if _, ok := m.call(m.init, (&abi.InitRequest{ABIVersion: 1}).Append(nil)); !ok {
		t.Fatal("ruled_init failed")
	}
	m.mustConfigure(1, map[string]any{"limit": 10, "window": "1s"})
	m.mustConfigure(2, map[string]any{"limit": 7, "window": "1500ms", "offset": "250us"})
	rng := rand.New(rand.NewPCG(3, 4))
	iterations := 2000
	if testing.Short() {
		iterations = 200
	}

	decideSeeds := [][]byte{
		(&abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "s", Hits: 3}}).Append(nil),
		(&abi.DecideRequest{ConfigID: 2, Request: sdk.Request{Subject: "s", Hits: -1 << 40, DedupID: "d", BestEffort: true}}).Append(nil),
		(&abi.DecideRequest{ConfigID: 2, Request: sdk.Request{Subject: "subject", Hits: -2, DedupID: "dedup", BestEffort: true,
			Attrs: map[string]string{"k": "v", "route": "/x"}}}).Append(nil),
	}
	cfg := map[uint64][3]int64{1: {10, 1_000_000, 0}, 2: {7, 1_500_000, 250}}
	t.Run("DecideRequest", func(t *testing.T) {
		m.reply = abi.AppendReply(nil, sdk.IntsReply(1, 2, 10, 8, 1_000_000, 0))
		for i := range iterations {
			msg := mutate(rng, decideSeeds[i%len(decideSeeds)])
			var want abi.DecideRequest
			errW := want.Decode(msg)
			evals := len(m.evals)
			out, ok := m.call(m.decide, msg)
			if ok != (errW == nil) {
				t.Fatalf("% x: module ok %v, sdk/abi %v", msg, ok, errW)
			}
			if ok {
				var resp abi.DecideResponse
				if err := resp.Decode(out); err != nil {
					t.Fatalf("% x: answer % x: %v", msg, out, err)
				}
				c, known := cfg[want.ConfigID]
				if !known {
					if resp.Error != fmt.Sprintf("unknown config id %d", want.ConfigID) {
						t.Fatalf("% x: %+v, want an unknown config", msg, resp)
					}
					continue
				}
				var eval abi.EvalRequest
				if len(m.evals) != evals+1 || eval.Decode(m.evals[evals]) != nil {
					t.Fatalf("% x: no EvalRequest", msg)
				}
				r := want.Request
				best := int64(0)
				if r.BestEffort {
					best = 1
				}
				wantArgs := []any{c[0], c[1], c[2], r.Hits, r.DedupID, best}
				if fmt.Sprint(eval.Args) != fmt.Sprint(wantArgs) || eval.Script != "decide" || fmt.Sprint(eval.Keys) != "[c d]" {
					t.Fatalf("% x: EvalRequest %+v, want args %v", msg, eval, wantArgs)
				}
			}
			if i%50 == 0 {
				m.mustDecide()
			}
		}
	})

	nested := []any{1, "two", nil, []byte{1}, time.Second, -2.5, true, map[string]any{"b": uint64(1 << 63), "a": []any{}}}
	configSeeds := [][]byte{
		configureMsg(t, 10, map[string]any{"limit": 10, "window": "1s", "offset": "250ms"}),
		configureMsg(t, 11, map[string]any{"limit": "12", "window": time.Minute, "extra": nested}),
		configureMsg(t, 12, map[string]any{"limit": 1.5, "window": 3, "offset": []byte("x")}),
	}
	t.Run("ConfigureRequest", func(t *testing.T) {
		for i := range iterations {
			msg := mutate(rng, configSeeds[i%len(configSeeds)])
			var want abi.ConfigureRequest
			errW := want.Decode(msg)
			out, ok := m.call(m.configure, msg)
			if ok != (errW == nil) {
				t.Fatalf("% x: module ok %v, sdk/abi %v", msg, ok, errW)
			}
			if !ok {
				continue
			}
			var resp abi.ConfigureResponse
			if err := resp.Decode(out); err != nil {
				t.Fatalf("% x: answer % x: %v", msg, out, err)
			}
			var problems []string
			if _, err := fixedwindow.New().Configure(want.Config); err != nil {
				problems = leaves(err, nil)
			}
			if !slices.Equal(resp.Errors, problems) {
				t.Fatalf("% x (%v):\nmodule %q\nnative %q", msg, want.Config, resp.Errors, problems)
			}
		}
		m.mustDecide()
	})

	replySeeds := [][]byte{
		abi.AppendReply(nil, sdk.IntsReply(1, 2, 10, 8, 1_000_000, 0)),
		abi.AppendReply(nil, sdk.IntsReply(0, 0, 1<<40, 0, -1<<62, 1<<62, 3)),
		abi.AppendReply(nil, sdk.NewReply([]any{int64(0), int64(0), int64(7), "3", int64(-5), int64(123456789), int64(-1)})),
		abi.AppendReplyError(nil, &abi.Error{Class: "script", Message: "ERR boom"}),
	}
	t.Run("Reply", func(t *testing.T) {
		req := (&abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "s", Hits: 1}}).Append(nil)
		for i := range iterations {
			m.reply = mutate(rng, replySeeds[i%len(replySeeds)])
			want, errW := abi.DecodeReply(m.reply)
			var d sdk.Decision
			if errW == nil {
				d, errW = sdk.DecisionFromReply(want, time.Second)
			}
			// What the host reads from the Go guest: durations in whole microseconds.
			var crossed abi.DecideResponse
			if err := crossed.Decode((&abi.DecideResponse{Decision: d}).Append(nil)); err != nil {
				t.Fatal(err)
			}
			d = crossed.Decision
			out, ok := m.call(m.decide, req)
			var resp abi.DecideResponse
			if !ok || resp.Decode(out) != nil {
				t.Fatalf("reply % x: the call failed", m.reply)
			}
			if (resp.Error != "") != (errW != nil) || resp.Decision != d {
				t.Fatalf("reply % x:\nmodule %+v\nsdk    %+v %v", m.reply, resp, d, errW)
			}
			// A capability error is its message; one without a message is still an error (the Go
			// guest would answer no error and a zero decision: a silent denial).
			var e *abi.Error
			if errors.As(errW, &e) && resp.Error != e.Message && (e.Message != "" || !strings.HasPrefix(resp.Error, "redis_eval failed")) {
				t.Fatalf("reply % x: error %q, want %q", m.reply, resp.Error, e.Message)
			}
		}
		m.mustDecide()
	})
}

// leaves returns the messages of an errors.Join tree, as sdk/guest sends them.
func leaves(err error, out []string) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			out = leaves(e, out)
		}
		return out
	}
	return append(out, err.Error())
}

// mutate returns a copy of b with a few random changes: bytes changed, inserted, removed or
// duplicated, the end cut off, a field appended.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = slices.Clone(b)
	for range 1 + rng.IntN(3) {
		switch rng.IntN(7) {
		case 0, 1:
			if len(b) > 0 {
				b[rng.IntN(len(b))] ^= byte(1 << rng.IntN(8))
			}
		case 2:
			if len(b) > 0 {
				b[rng.IntN(len(b))] = byte(rng.IntN(256))
			}
		case 3:
			i := rng.IntN(len(b) + 1)
			b = slices.Insert(b, i, byte(rng.IntN(256)))
		case 4:
			if len(b) > 0 {
				i := rng.IntN(len(b))
				b = slices.Delete(b, i, i+1)
			}
		case 5:
			b = b[:rng.IntN(len(b)+1)]
		case 6:
			i, j := rng.IntN(len(b)+1), rng.IntN(len(b)+1)
			if i > j {
				i, j = j, i
			}
			b = slices.Insert(b, j, b[i:j]...)
		}
	}
	return b
}
