package wasm

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/wasm/internal/meter"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// hostModule builds module ruled_v1: the functions guests import.
func hostModule(rt wazero.Runtime) wazero.HostModuleBuilder {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	return rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(redisEval), []api.ValueType{i32, i32, i32, i32}, []api.ValueType{i64}).
		WithParameterNames("req", "req_len", "out", "out_cap").
		Export(abi.ImportRedisEval).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(takeReply), []api.ValueType{i32, i32}, []api.ValueType{i64}).
		WithParameterNames("out", "out_cap").
		Export(abi.ImportTakeReply).
		NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(logLine), []api.ValueType{i32, i32, i32}, nil).
		WithParameterNames("level", "msg", "msg_len").
		Export(abi.ImportLog)
}

// meterModule builds the module instrumented guests call back into every
// meter.Quantum loop iterations (package meter): tick aborts the call when
// its context is done, and otherwise grants another quantum.
func meterModule(rt wazero.Runtime) wazero.HostModuleBuilder {
	return rt.NewHostModuleBuilder(meter.ImportModule).
		NewFunctionBuilder().
		WithGoFunction(api.GoFunc(tick), nil, []api.ValueType{api.ValueTypeI32}).
		Export(meter.ImportName)
}

// tick implements ruled_meter.tick() -> i32.
func tick(ctx context.Context, stack []uint64) {
	if err := ctx.Err(); err != nil {
		// wazero unwinds the guest and returns this as the call's error.
		panic(fmt.Errorf("stopped: %w", err))
	}
	stack[0] = meter.Quantum
}

// redisEval implements ruled_v1.redis_eval(req, req_len, out, out_cap) -> i64.
func redisEval(ctx context.Context, mod api.Module, stack []uint64) {
	in := callingInstance(ctx)
	if in == nil || in.host == nil {
		stack[0] = status(abi.StatusNoDecision)
		return
	}
	stack[0] = uint64(in.redisEval(ctx, mod.Memory(), uint32(stack[0]), uint32(stack[1]), uint32(stack[2]), uint32(stack[3])))
}

func (in *instance) redisEval(ctx context.Context, mem api.Memory, req, reqLen, out, outCap uint32) int64 {
	in.pending = nil
	msg, ok := mem.Read(req, reqLen)
	if !ok {
		return int64(abi.StatusBadPointer)
	}
	if _, ok := mem.Read(out, outCap); !ok {
		return int64(abi.StatusBadPointer)
	}
	if outCap < abi.MinReplyCap {
		return int64(abi.StatusSmallBuffer)
	}
	if err := in.eval.Decode(msg); err != nil {
		return int64(abi.StatusBadMessage)
	}
	reply, err := in.host.Eval(ctx, in.eval.Script, in.eval.Keys, in.eval.Args...)
	if err != nil {
		in.capErr = err
		in.reply = abi.AppendReplyError(in.reply[:0], &abi.Error{Class: string(capability.ClassOf(err)), Message: err.Error()})
	} else {
		in.reply = abi.AppendReply(in.reply[:0], reply)
	}
	clear(in.eval.Args) // drop references to this call's arguments
	if len(in.reply) > int(outCap) {
		in.pending = in.reply
		return -int64(len(in.reply))
	}
	mem.Write(out, in.reply)
	return int64(len(in.reply))
}

// takeReply implements ruled_v1.take_reply(out, out_cap) -> i64.
func takeReply(ctx context.Context, mod api.Module, stack []uint64) {
	in := callingInstance(ctx)
	out, outCap := uint32(stack[0]), uint32(stack[1])
	switch {
	case in == nil || in.pending == nil:
		stack[0] = status(abi.StatusNoReply)
	case !inMemory(mod.Memory(), out, outCap):
		stack[0] = status(abi.StatusBadPointer)
	case len(in.pending) > int(outCap):
		stack[0] = uint64(-int64(len(in.pending)))
	default:
		mod.Memory().Write(out, in.pending)
		stack[0] = uint64(len(in.pending))
		in.pending = nil
	}
}

// status encodes a negative result in an i64 stack slot.
func status(s abi.Status) uint64 { return uint64(int64(s)) }

func inMemory(mem api.Memory, ptr, n uint32) bool {
	_, ok := mem.Read(ptr, n)
	return ok
}

// logLine implements ruled_v1.log(level, msg, msg_len).
func logLine(ctx context.Context, mod api.Module, stack []uint64) {
	in := callingInstance(ctx)
	if in == nil {
		return
	}
	level := sdk.Level(int32(uint32(stack[0])))
	msg, ok := mod.Memory().Read(uint32(stack[1]), uint32(stack[2]))
	if !ok {
		in.p.guestLog(ctx, nil, sdk.LevelWarn, "log: message outside guest memory")
		return
	}
	line := truncate(msg, maxLogLine)
	if level >= sdk.LevelError {
		in.noteDetail(line)
	}
	in.p.guestLog(ctx, in.host, level, line)
}

// noteDetail keeps the first error line of a call for CallError.Detail.
func (in *instance) noteDetail(line string) {
	if in.detail == "" {
		if i := strings.IndexByte(line, '\n'); i >= 0 {
			line = line[:i]
		}
		in.detail = truncate([]byte(line), maxDetail)
	}
}

// wasiModule is the name of the WASI module guests may import from.
const wasiModule = "wasi_snapshot_preview1"

// checkModule verifies, before any instance exists, that code is a ruled
// ABI v1 reactor and imports only functions ruled provides, with the right
// signatures. metered is the meter module when code has been instrumented
// (package meter rejects modules that import it themselves), or nil.
func checkModule(code, wasi, ruled, metered wazero.CompiledModule) error {
	var bad []string
	for _, f := range code.ImportedFunctions() {
		mod, name, _ := f.Import()
		var provider wazero.CompiledModule
		switch mod {
		case wasiModule:
			provider = wasi
		case abi.ImportModule:
			provider = ruled
		case meter.ImportModule:
			provider = metered
		}
		var want api.FunctionDefinition
		if provider != nil {
			want = provider.ExportedFunctions()[name]
		}
		switch {
		case want == nil:
			bad = append(bad, fmt.Sprintf("%s.%s (not provided by ruled)", mod, name))
		case !slices.Equal(f.ParamTypes(), want.ParamTypes()) || !slices.Equal(f.ResultTypes(), want.ResultTypes()):
			bad = append(bad, fmt.Sprintf("%s.%s with signature %s (ruled provides %s)", mod, name, signature(f), signature(want)))
		}
	}
	for _, m := range code.ImportedMemories() {
		mod, name, _ := m.Import()
		bad = append(bad, fmt.Sprintf("memory %s.%s (a plugin must define its own memory)", mod, name))
	}
	if len(bad) > 0 {
		return fmt.Errorf("module imports what ruled does not provide: %s; a plugin may import only %s (%s, %s, %s) and %s",
			strings.Join(bad, ", "), abi.ImportModule, abi.ImportRedisEval, abi.ImportTakeReply, abi.ImportLog, wasiModule)
	}

	exports := code.ExportedFunctions()
	if exports[abi.ExportMarker] == nil {
		var other []string
		for name := range exports {
			if strings.HasPrefix(name, "ruled_abi_") {
				other = append(other, name)
			}
		}
		if len(other) > 0 {
			slices.Sort(other)
			return fmt.Errorf("module speaks %s; this ruled speaks only %s", strings.Join(other, ", "), abi.ExportMarker)
		}
		return fmt.Errorf("module does not export %s: not a ruled plugin (build it with sdk/guest)", abi.ExportMarker)
	}
	if exports["_initialize"] == nil {
		hint := ""
		if exports["_start"] != nil {
			hint = ": it is a WASI command; build with -buildmode=c-shared"
		}
		return fmt.Errorf("module is not a WASI reactor (no _initialize export)%s", hint)
	}
	if _, ok := code.ExportedMemories()["memory"]; !ok {
		return fmt.Errorf("module does not export its memory as %q", "memory")
	}
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	for _, e := range []struct {
		name            string
		params, results []api.ValueType
	}{
		{abi.ExportMarker, nil, nil},
		{"_initialize", nil, nil},
		{abi.ExportBuf, []api.ValueType{i32}, []api.ValueType{i32}},
		{abi.ExportInit, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		{abi.ExportConfigure, []api.ValueType{i32, i32}, []api.ValueType{i64}},
		{abi.ExportDecide, []api.ValueType{i32, i32}, []api.ValueType{i64}},
	} {
		f := exports[e.name]
		if f == nil {
			return fmt.Errorf("module does not export %s", e.name)
		}
		if !slices.Equal(f.ParamTypes(), e.params) || !slices.Equal(f.ResultTypes(), e.results) {
			return fmt.Errorf("export %s has signature %s, want %s", e.name, signature(f),
				signatureOf(e.params, e.results))
		}
	}
	return nil
}

func signature(f api.FunctionDefinition) string { return signatureOf(f.ParamTypes(), f.ResultTypes()) }

func signatureOf(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}
