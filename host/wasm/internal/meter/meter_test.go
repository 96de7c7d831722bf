package meter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// ---- A tiny assembler for test modules ----

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func u32(v uint32) []byte { return appendU32(nil, v) }

func str(s string) []byte { return appendName(nil, s) }

// vec is a vector: the number of items, then the items.
func vec(items ...[]byte) []byte { return cat(u32(uint32(len(items))), cat(items...)) }

// sect is a section with its id and size.
func sect(id byte, parts ...[]byte) []byte {
	p := cat(parts...)
	return cat([]byte{id}, u32(uint32(len(p))), p)
}

// custom is a custom section.
func custom(name string, parts ...[]byte) []byte {
	return sect(secCustom, str(name), cat(parts...))
}

// wasm is a module: the header, then the sections.
func wasm(sections ...[]byte) []byte { return cat(header, cat(sections...)) }

// ftype is a function type.
func ftype(params, results []byte) []byte {
	return cat([]byte{0x60}, u32(uint32(len(params))), params, u32(uint32(len(results))), results)
}

// body is a code entry: its size, locals (i32 locals, in one group) and the
// instructions, followed by end.
func body(i32Locals uint32, instrs ...[]byte) []byte {
	locals := vec()
	if i32Locals > 0 {
		locals = vec(cat(u32(i32Locals), []byte{0x7f}))
	}
	b := cat(locals, cat(instrs...), []byte{0x0b})
	return cat(u32(uint32(len(b))), b)
}

// Instructions.
func i32c(v int32) []byte     { return cat([]byte{0x41}, appendS64(nil, int64(v))) }
func lget(i uint32) []byte    { return cat([]byte{0x20}, u32(i)) }
func gget(i uint32) []byte    { return cat([]byte{0x23}, u32(i)) }
func gset(i uint32) []byte    { return cat([]byte{0x24}, u32(i)) }
func call(f uint32) []byte    { return cat([]byte{0x10}, u32(f)) }
func refFunc(f uint32) []byte { return cat([]byte{0xd2}, u32(f)) }
func callIndirect(typ uint32) []byte {
	return cat([]byte{0x11}, u32(typ), []byte{0x00})
}

var (
	i32    = []byte{0x7f}
	end    = []byte{0x0b}
	i32Add = []byte{0x6a}
	i32Sub = []byte{0x6b}
	i32Mul = []byte{0x6c}
)

// importFunc and exportOf are import and export entries.
func importFunc(mod, name string, typ uint32) []byte {
	return cat(str(mod), str(name), []byte{0x00}, u32(typ))
}

func exportOf(name string, kind byte, idx uint32) []byte {
	return cat(str(name), []byte{kind}, u32(idx))
}

// sectionsOf splits a module into its sections (parse refuses
// instrumented modules: they import ruled_meter).
func sectionsOf(t testing.TB, bin []byte) []section {
	t.Helper()
	if !bytes.HasPrefix(bin, header) {
		t.Fatal("no header")
	}
	r := &reader{b: bin, off: len(header)}
	var secs []section
	for r.more() {
		id := r.byte()
		secs = append(secs, section{id, r.bytes(int(r.u32()))})
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	return secs
}

// ---- Test modules ----

// Indices of the semantics module's functions.
const (
	fnF         = iota // env.f, imported: x -> 2x+1
	fnLoop             // n -> f(1+2+...+n) = n(n+1)+1, n loop iterations
	fnCallee           // x -> 3x + genv.g
	fnCaller           // callee(5)
	fnIndirect         // i -> table[i](10)
	fnStart            // the start function: started = 42
	fnStarted          // -> started
	fnViaGlobal        // puts the funcref global (neg) in table[3], calls it with 10
	fnNeg              // x -> 100-x
	fnViaInit          // table.init of the passive segment (plus1000) to table[4], calls it with 10
	fnSq               // x -> x*x
	fnRefInCode        // ref.func callee to table[4], calls it with 10
	fnPlus1000         // x -> x+1000
)

// semanticsModule imports a function and a global and uses function
// indices in every place Instrument maps them that wazero runs: calls, the
// start function, exports, element segments (flags 0, 1, 3, 4, 5), a
// funcref global's ref.func initializer, ref.func in code, table.init and
// call_indirect.
func semanticsModule() []byte {
	t0, t1, t2 := uint32(0), uint32(1), uint32(2) // () -> i32, (i32) -> i32, () -> ()
	return wasm(
		sect(secType, vec(ftype(nil, i32), ftype(i32, i32), ftype(nil, nil))),
		sect(secImport, vec(
			importFunc("env", "f", t1),
			cat(str("genv"), str("g"), []byte{0x03, 0x7f, 0x00}),
		)),
		sect(secFunction, vec(u32(t1), u32(t1), u32(t0), u32(t1), u32(t2), u32(t0), u32(t0), u32(t1), u32(t0), u32(t1), u32(t0), u32(t1))),
		sect(secTable, vec([]byte{0x70, 0x00, 0x05})),
		sect(secMemory, vec([]byte{0x00, 0x01})),
		sect(secGlobal, vec(
			cat([]byte{0x7f, 0x01}, i32c(0), end),        // 1: started
			cat([]byte{0x70, 0x00}, refFunc(fnNeg), end), // 2: funcref = neg
			cat([]byte{0x7f, 0x00}, gget(0), end),        // 3: = genv.g
		)),
		sect(secExport, vec(
			exportOf("f", 0, fnF),
			exportOf("loop", 0, fnLoop),
			exportOf("callee", 0, fnCallee),
			exportOf("caller", 0, fnCaller),
			exportOf("indirect", 0, fnIndirect),
			exportOf("started", 0, fnStarted),
			exportOf("viaGlobal", 0, fnViaGlobal),
			exportOf("viaInit", 0, fnViaInit),
			exportOf("refInCode", 0, fnRefInCode),
			exportOf("g3", 3, 3),
			exportOf("table", 1, 0),
			exportOf("mem", 2, 0),
		)),
		sect(secStart, u32(fnStart)),
		sect(secElement, vec(
			cat(u32(0), i32c(0), end, vec(u32(fnLoop), u32(fnCallee))),                        // table[0..1]
			cat(u32(4), i32c(2), end, vec(cat(refFunc(fnSq), end), []byte{0xd0, 0x70, 0x0b})), // table[2..3]
			cat(u32(1), []byte{0x00}, vec(u32(fnPlus1000))),                                   // passive, segment 2
			cat(u32(3), []byte{0x00}, vec(u32(fnCallee))),                                     // declarative
			cat(u32(5), []byte{0x70}, vec(cat(refFunc(fnNeg), end))),                          // passive expressions
		)),
		sect(secCode, vec(
			// loop: do { i++; sum += i } while i < n; return f(sum)
			body(2, []byte{0x03, 0x40},
				lget(1), i32c(1), i32Add, []byte{0x22, 0x01}, lget(2), i32Add, []byte{0x21, 0x02},
				lget(1), lget(0), []byte{0x48, 0x0d, 0x00}, end,
				lget(2), call(fnF)),
			body(0, lget(0), i32c(3), i32Mul, gget(0), i32Add), // callee
			body(0, i32c(5), call(fnCallee)),                   // caller
			body(0, i32c(10), lget(0), callIndirect(t1)),       // indirect
			body(0, i32c(42), gset(1)),                         // start
			body(0, gget(1)),                                   // started
			body(0, i32c(3), gget(2), []byte{0x26, 0x00}, i32c(10), i32c(3), callIndirect(t1)),              // viaGlobal
			body(0, i32c(100), lget(0), i32Sub),                                                             // neg
			body(0, i32c(4), i32c(0), i32c(1), []byte{0xfc, 12, 2, 0}, i32c(10), i32c(4), callIndirect(t1)), // viaInit
			body(0, lget(0), lget(0), i32Mul),                                                               // sq
			body(0, i32c(4), refFunc(fnCallee), []byte{0x26, 0x00}, i32c(10), i32c(4), callIndirect(t1)),    // refInCode
			body(0, lget(0), i32c(1000), i32Add),                                                            // plus1000
		)),
	)
}

// genvModule exports the global genv.g = 7 the semantics module imports
// (wazero's host modules export only functions).
func genvModule() []byte {
	return wasm(
		sect(secGlobal, vec(cat([]byte{0x7f, 0x00}, i32c(7), end))),
		sect(secExport, vec(exportOf("g", 3, 0))),
	)
}

// tailModule has an imported function, rec () -> i32 that tail-calls
// itself forever, and countdown (n) -> i32 that tail-calls itself n times
// and returns 7.
func tailModule() []byte {
	return wasm(
		sect(secType, vec(ftype(nil, i32), ftype(i32, i32))),
		sect(secImport, vec(importFunc("env", "f", 1))),
		sect(secFunction, vec(u32(0), u32(1))),
		sect(secExport, vec(exportOf("rec", 0, 1), exportOf("countdown", 0, 2))),
		sect(secCode, vec(
			body(0, []byte{0x12, 0x01}), // return_call rec
			body(0, lget(0), []byte{0x45, 0x04, 0x7f}, i32c(7), []byte{0x05},
				lget(0), i32c(1), i32Sub, []byte{0x12, 0x02}, end), // if n == 0 7 else return_call countdown(n-1)
		)),
	)
}

// spinModule has an imported function and spin, an infinite loop.
func spinModule() []byte {
	return wasm(
		sect(secType, vec(ftype(nil, nil), ftype(i32, i32))),
		sect(secImport, vec(importFunc("env", "f", 1))),
		sect(secFunction, vec(u32(0))),
		sect(secExport, vec(exportOf("spin", 0, 1))),
		sect(secCode, vec(body(0, []byte{0x03, 0x40, 0x0c, 0x00, 0x0b}))),
	)
}

// namedModule has a name section naming the module, an imported and two
// defined functions and the defined functions' parameters, and custom
// sections Instrument keeps or drops.
func namedModule() []byte {
	return wasm(
		sect(secType, vec(ftype(i32, i32))),
		sect(secImport, vec(importFunc("env", "f", 0))),
		sect(secFunction, vec(u32(0), u32(0))),
		sect(secExport, vec(exportOf("a", 0, 1), exportOf("b", 0, 2), exportOf("f", 0, 0))),
		sect(secCode, vec(body(0, lget(0)), body(0, lget(0), call(0)))),
		custom(".debug_info", []byte{1, 2, 3}),
		custom("producers", []byte{0}),
		custom("sourceMappingURL", str("x.map")),
		custom("name",
			sect(0, str("named")),
			sect(1, vec(cat(u32(0), str("imp_f")), cat(u32(1), str("first")), cat(u32(2), str("second")))),
			sect(2, vec(cat(u32(1), vec(cat(u32(0), str("y")))), cat(u32(2), vec(cat(u32(0), str("x")))))),
		),
	)
}

// ---- Running modules ----

// ticker implements ruled_meter.tick: it counts its calls and returns count,
// and panics with err once it has been called more than limit times (if
// limit > 0).
type ticker struct {
	calls atomic.Int64
	count int32
	limit int64
	err   error
}

func (tk *ticker) tick(_ context.Context, stack []uint64) {
	if n := tk.calls.Add(1); tk.limit > 0 && n > tk.limit {
		panic(tk.err)
	}
	stack[0] = api.EncodeI32(tk.count)
}

var features = api.CoreFeaturesV2 | experimental.CoreFeaturesTailCall

// newRuntime returns a compiler runtime with tail calls, the host modules
// env (f: x -> 2x+1) and ruled_meter (tk), and the module genv.
func newRuntime(t testing.TB, tk *ticker) wazero.Runtime {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler().WithCoreFeatures(features))
	t.Cleanup(func() { rt.Close(ctx) })
	_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(_ context.Context, stack []uint64) {
			stack[0] = api.EncodeI32(2*api.DecodeI32(stack[0]) + 1)
		}), []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("f").Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.NewHostModuleBuilder(ImportModule).NewFunctionBuilder().
		WithGoFunction(api.GoFunc(tk.tick), nil, []api.ValueType{api.ValueTypeI32}).
		Export(ImportName).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = rt.InstantiateWithConfig(ctx, genvModule(), wazero.NewModuleConfig().WithName("genv")); err != nil {
		t.Fatal(err)
	}
	return rt
}

// instantiate compiles and instantiates bin anonymously.
func instantiate(t testing.TB, rt wazero.Runtime, bin []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	cm, err := rt.CompileModule(ctx, bin)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	mod, err := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatalf("instantiate: %v", err)
	}
	t.Cleanup(func() { mod.Close(ctx) })
	return mod
}

// call1 calls an exported function that returns one i32.
func call1(ctx context.Context, mod api.Module, name string, args ...int32) (int32, error) {
	fn := mod.ExportedFunction(name)
	if fn == nil {
		return 0, fmt.Errorf("no export %q", name)
	}
	var params []uint64
	for _, a := range args {
		params = append(params, api.EncodeI32(a))
	}
	res, err := fn.Call(ctx, params...)
	if err != nil {
		return 0, err
	}
	return api.DecodeI32(res[0]), nil
}

// instrument is Instrument that fails the test on an error.
func instrument(t testing.TB, bin []byte) []byte {
	t.Helper()
	out, err := Instrument(bin)
	if err != nil {
		t.Fatalf("Instrument: %v", err)
	}
	return out
}

// expectedTicks is how many times tick is called after checks count-downs
// when it returns count: the global starts at Quantum, and tick is called
// at the check that finds it zero.
func expectedTicks(checks, count int64) int64 {
	if checks <= Quantum {
		return 0
	}
	return 1 + (checks-Quantum-1)/count
}

// ---- Tests ----

// TestExpectedTicks pins the formula the tick-count tests rely on to
// concrete values.
func TestExpectedTicks(t *testing.T) {
	for _, c := range []struct{ checks, want int64 }{
		{0, 0}, {Quantum, 0}, {Quantum + 1, 1}, {Quantum + 10, 1}, {Quantum + 11, 2}, {Quantum + 1 + 10*7 + 3, 8},
	} {
		if got := expectedTicks(c.checks, 10); got != c.want {
			t.Errorf("expectedTicks(%d, 10) = %d, want %d", c.checks, got, c.want)
		}
	}
}

// TestSemantics shows the instrumented module computes what the original
// does through every kind of function reference wazero runs.
func TestSemantics(t *testing.T) {
	ctx := context.Background()
	orig := semanticsModule()
	inst := instrument(t, orig)
	rt := newRuntime(t, &ticker{count: 10})
	loop := func(n int32) int32 { return n*(n+1) + 1 }
	cases := []struct {
		name string
		args []int32
		want int32
	}{
		{"f", []int32{4}, 9},
		{"loop", []int32{1}, loop(1)},
		{"loop", []int32{100}, loop(100)},
		{"loop", []int32{3*Quantum + 17}, loop(3*Quantum + 17)},
		{"callee", []int32{1}, 10},
		{"caller", nil, 22},
		{"indirect", []int32{0}, loop(10)},
		{"indirect", []int32{1}, 37},
		{"indirect", []int32{2}, 100},
		{"started", nil, 42},
		{"viaGlobal", nil, 90},
		{"viaInit", nil, 1010},
		{"refInCode", nil, 37},
	}
	for _, bin := range []struct {
		name string
		b    []byte
	}{{"original", orig}, {"instrumented", inst}} {
		mod := instantiate(t, rt, bin.b)
		for _, c := range cases {
			got, err := call1(ctx, mod, c.name, c.args...)
			if err != nil || got != c.want {
				t.Errorf("%s: %s(%v) = %d, %v; want %d", bin.name, c.name, c.args, got, err, c.want)
			}
		}
		// table[3] is null until viaGlobal fills it: a fresh instance traps.
		fresh := instantiate(t, rt, bin.b)
		if _, err := call1(ctx, fresh, "indirect", 3); err == nil {
			t.Errorf("%s: indirect(3) through a null entry did not trap", bin.name)
		}
		if g := mod.ExportedGlobal("g3"); g == nil || api.DecodeI32(g.Get()) != 7 {
			t.Errorf("%s: global g3 is not 7", bin.name)
		}
	}
}

// TestTickCount shows tick is called exactly once per count loop
// iterations after the first Quantum, and that the count carries over from
// one call to the next in an instance.
func TestTickCount(t *testing.T) {
	ctx := context.Background()
	inst := instrument(t, semanticsModule())
	const count = 10
	for _, runs := range [][]int64{
		{1}, {Quantum}, {Quantum + 1}, {Quantum + count}, {Quantum + count + 1},
		{Quantum + 1 + 10*count + 3}, {3*Quantum + 17}, {Quantum / 2, Quantum / 2, 1},
		{Quantum, count, 1, count - 1},
	} {
		tk := &ticker{count: count}
		rt := newRuntime(t, tk)
		mod := instantiate(t, rt, inst)
		var total int64
		for _, n := range runs {
			if _, err := call1(ctx, mod, "loop", int32(n)); err != nil {
				t.Fatal(err)
			}
			total += n
			if got, want := tk.calls.Load(), expectedTicks(total, count); got != want {
				t.Errorf("loop%v: after %d iterations tick was called %d times, want %d", runs, total, got, want)
			}
		}
	}
}

// TestTailCallCount shows a function that makes tail calls counts down on
// entry: countdown(n) enters itself n+1 times.
func TestTailCallCount(t *testing.T) {
	ctx := context.Background()
	orig := tailModule()
	inst := instrument(t, orig)
	for _, n := range []int64{0, Quantum - 1, Quantum, Quantum + 25, 2*Quantum + 3} {
		tk := &ticker{count: 10}
		rt := newRuntime(t, tk)
		for _, bin := range [][]byte{orig, inst} {
			got, err := call1(ctx, instantiate(t, rt, bin), "countdown", int32(n))
			if err != nil || got != 7 {
				t.Errorf("countdown(%d) = %d, %v; want 7", n, got, err)
			}
		}
		if got, want := tk.calls.Load(), expectedTicks(n+1, 10); got != want {
			t.Errorf("countdown(%d): tick was called %d times, want %d", n, got, want)
		}
	}
}

var errStop = errors.New("stop the guest")

// TestInterrupt shows that a tick that panics stops an infinite loop and an
// infinite tail recursion, and the call's error wraps the panic's.
func TestInterrupt(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, fn string
		bin      []byte
	}{{"loop", "spin", spinModule()}, {"tail call", "rec", tailModule()}} {
		t.Run(c.name, func(t *testing.T) {
			const k = 5
			tk := &ticker{count: 10, limit: k, err: errStop}
			rt := newRuntime(t, tk)
			mod := instantiate(t, rt, instrument(t, c.bin))
			done := make(chan error, 1)
			go func() {
				_, err := mod.ExportedFunction(c.fn).Call(ctx)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(20 * time.Second):
				// Nothing stops the guest, and it soon blocks the garbage
				// collector and so every test: end the process.
				panic(fmt.Sprintf("%s() still runs after 20s (tick called %d times)", c.fn, tk.calls.Load()))
			}
			if !errors.Is(err, errStop) {
				t.Fatalf("%s() = %v, want an error wrapping %v", c.fn, err, errStop)
			}
			if got := tk.calls.Load(); got != k+1 {
				t.Errorf("tick was called %d times, want %d", got, k+1)
			}
		})
	}
}

// TestDeadline shows the host's use: a tick that panics once the call's
// context is done stops an infinite loop soon after the deadline.
func TestDeadline(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	t.Cleanup(func() { rt.Close(ctx) })
	_, err := rt.NewHostModuleBuilder("env").NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(context.Context, []uint64) {}), []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}).
		Export("f").Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = rt.NewHostModuleBuilder(ImportModule).NewFunctionBuilder().
		WithGoFunction(api.GoFunc(func(ctx context.Context, stack []uint64) {
			if err := ctx.Err(); err != nil {
				panic(fmt.Errorf("stopped: %w", err))
			}
			stack[0] = Quantum
		}), nil, []api.ValueType{api.ValueTypeI32}).
		Export(ImportName).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mod := instantiate(t, rt, instrument(t, spinModule()))
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = mod.ExportedFunction("spin").Call(cctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("spin() = %v, want an error wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("spin() took %v to stop", d)
	}
}

// TestNames shows the name section's function and parameter names stay on
// the right functions, and the byte-offset custom sections are dropped.
func TestNames(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, &ticker{count: 10})
	orig := namedModule()
	inst := instrument(t, orig)
	for _, bin := range []struct {
		name string
		b    []byte
	}{{"original", orig}, {"instrumented", inst}} {
		cm, err := rt.CompileModule(ctx, bin.b)
		if err != nil {
			t.Fatalf("%s: %v", bin.name, err)
		}
		defs := cm.ExportedFunctions()
		for _, c := range []struct{ export, name, debug, param string }{
			{"a", "first", "named.first", "y"},
			{"b", "second", "named.second", "x"},
			{"f", "imp_f", "named.imp_f", ""},
		} {
			d := defs[c.export]
			if d == nil {
				t.Fatalf("%s: no export %q", bin.name, c.export)
			}
			if d.Name() != c.name || d.DebugName() != c.debug {
				t.Errorf("%s: export %q is named %q (%q), want %q (%q)", bin.name, c.export, d.Name(), d.DebugName(), c.name, c.debug)
			}
			if c.param != "" && !slices.Equal(d.ParamNames(), []string{c.param}) {
				t.Errorf("%s: export %q has parameters %q, want [%q]", bin.name, c.export, d.ParamNames(), c.param)
			}
		}
		for _, d := range cm.ImportedFunctions() {
			mod, _, _ := d.Import()
			if mod == ImportModule && d.Name() != "" {
				t.Errorf("%s: the tick import is named %q", bin.name, d.Name())
			}
			if mod == "env" && d.Name() != "imp_f" {
				t.Errorf("%s: env.f is named %q", bin.name, d.Name())
			}
		}
		cm.Close(ctx)
	}
	secs := sectionsOf(t, inst)
	var customs []string
	for _, s := range secs {
		if s.id == secCustom {
			customs = append(customs, (&reader{b: s.payload}).name())
		}
	}
	if want := []string{"producers", "name"}; !slices.Equal(customs, want) {
		t.Errorf("custom sections %q, want %q", customs, want)
	}
}

// TestNamesOutOfRange shows a name section naming a function that does
// not exist is dropped, not an error.
func TestNamesOutOfRange(t *testing.T) {
	bin := wasm(
		sect(secType, vec(ftype(nil, nil))),
		sect(secFunction, vec(u32(0))),
		sect(secCode, vec(body(0))),
		custom("name", sect(1, vec(cat(u32(7), str("ghost"))))),
	)
	secs := sectionsOf(t, instrument(t, bin))
	for _, s := range secs {
		if s.id == secCustom {
			t.Errorf("custom section kept: %q", s.payload)
		}
	}
}

// TestMissingSections shows the type, import and global sections are
// created in order when the module lacks them, and the result runs.
func TestMissingSections(t *testing.T) {
	ctx := context.Background()
	// Only a code section's worth: a function with a loop, exported.
	bin := wasm(
		sect(secType, vec(ftype(nil, i32))),
		sect(secFunction, vec(u32(0))),
		sect(secExport, vec(exportOf("run", 0, 0))),
		sect(secCode, vec(body(1, []byte{0x03, 0x40}, lget(0), i32c(1), i32Add, []byte{0x22, 0x00},
			i32c(Quantum+20), []byte{0x48, 0x0d, 0x00}, end, lget(0)))),
	)
	inst := instrument(t, bin)
	secs := sectionsOf(t, inst)
	var ids []byte
	for _, s := range secs {
		ids = append(ids, s.id)
	}
	if want := []byte{secType, secImport, secFunction, secGlobal, secExport, secCode}; !bytes.Equal(ids, want) {
		t.Errorf("sections %v, want %v", ids, want)
	}
	tk := &ticker{count: 10}
	rt := newRuntime(t, tk)
	got, err := call1(ctx, instantiate(t, rt, inst), "run")
	if err != nil || got != Quantum+20 {
		t.Errorf("run() = %d, %v; want %d", got, err, Quantum+20)
	}
	if got, want := tk.calls.Load(), expectedTicks(Quantum+20, 10); got != want {
		t.Errorf("tick was called %d times, want %d", got, want)
	}
	// An empty module gets the three sections too, and compiles.
	empty := instrument(t, wasm())
	if got := len(sectionsOf(t, empty)); got != 3 {
		t.Errorf("instrumented empty module has %d sections, want 3", got)
	}
	if _, err := rt.CompileModule(ctx, empty); err != nil {
		t.Errorf("instrumented empty module: %v", err)
	}
}

// TestElementEncodings shows every element segment encoding has its
// function indices mapped, byte for byte.
func TestElementEncodings(t *testing.T) {
	rw := &rewriter{m: &module{funcImports: 2, funcs: 300, globals: 1}, tick: 2}
	// Indices 1 (imported, kept), 5 and 200 (defined, shifted; 200 takes
	// two LEB128 bytes) in each encoding.
	seg := func(f func(uint32) uint32) []byte {
		idx := vec(u32(f(1)), u32(f(5)), u32(f(200)))
		exprs := vec(cat(refFunc(f(1)), end), cat(refFunc(f(5)), end), cat(refFunc(f(200)), end), []byte{0xd0, 0x70, 0x0b}, cat(gget(0), end))
		off := cat(i32c(3), end)
		return vec(
			cat(u32(0), off, idx),
			cat(u32(1), []byte{0x00}, idx),
			cat(u32(2), u32(1), off, []byte{0x00}, idx),
			cat(u32(3), []byte{0x00}, idx),
			cat(u32(4), off, exprs),
			cat(u32(5), []byte{0x70}, exprs),
			cat(u32(6), u32(1), off, []byte{0x70}, exprs),
			cat(u32(7), []byte{0x70}, exprs),
		)
	}
	in := seg(func(i uint32) uint32 { return i })
	want := seg(func(i uint32) uint32 {
		if i >= 2 {
			return i + 1
		}
		return i
	})
	got, err := rw.elements(in)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("elements:\n got %x\nwant %x", got, want)
	}
	if _, err := rw.elements(vec(cat(u32(8), u32(0)))); err == nil || !strings.Contains(err.Error(), "flags 8") {
		t.Errorf("flags 8: %v", err)
	}
	if _, err := rw.elements(vec(cat(u32(1), []byte{0x00}, vec(u32(300))))); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Errorf("index 300 of 300: %v", err)
	}
}

// TestTableInitializer shows a table's initializer expression (function
// references proposal, which wazero does not run) has its ref.func mapped.
func TestTableInitializer(t *testing.T) {
	rw := &rewriter{m: &module{funcImports: 1, funcs: 4}, tick: 1}
	in := vec([]byte{0x70, 0x00, 0x01}, cat([]byte{0x40, 0x00, 0x70, 0x01, 0x01, 0x02}, refFunc(3), end))
	want := vec([]byte{0x70, 0x00, 0x01}, cat([]byte{0x40, 0x00, 0x70, 0x01, 0x01, 0x02}, refFunc(4), end))
	got, err := rw.tables(in)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("tables = %x, %v; want %x", got, err, want)
	}
}

// TestTailCallEntry shows the count-down is put at the entry of functions
// with return_call_indirect, and of no function without tail calls or loops.
func TestTailCallEntry(t *testing.T) {
	bin := wasm(
		sect(secType, vec(ftype(nil, nil))),
		sect(secFunction, vec(u32(0), u32(0))),
		sect(secTable, vec([]byte{0x70, 0x00, 0x01})),
		sect(secCode, vec(body(0, i32c(0), []byte{0x13, 0x00, 0x00}), body(0, call(0)))),
	)
	secs := sectionsOf(t, instrument(t, bin))
	check := (&rewriter{fuel: 0, tick: 0}).check(nil)
	entry := cat(vec(), check, i32c(0), []byte{0x13, 0x00, 0x00}, end)
	want := vec(cat(u32(uint32(len(entry))), entry), body(0, call(1)))
	if got := secs[len(secs)-1].payload; !bytes.Equal(got, want) {
		t.Errorf("code section\n got %x\nwant %x", got, want)
	}
}

// TestRefuse shows Instrument refuses what it does not understand, with an
// error naming the problem.
func TestRefuse(t *testing.T) {
	typ := sect(secType, vec(ftype(nil, nil)))
	fn := sect(secFunction, vec(u32(0)))
	full := semanticsModule()
	for _, c := range []struct {
		name, want string
		bin        []byte
	}{
		{"not wasm", "not a WebAssembly", []byte("\x7fELF\x02\x01\x01\x00")},
		{"empty", "not a WebAssembly", nil},
		{"version 2", "not a WebAssembly", []byte{0x00, 'a', 's', 'm', 0x02, 0x00, 0x00, 0x00}},
		{"truncated", "unexpected end", full[:len(full)-3]},
		{"truncated in a body", "unexpected end", wasm(typ, fn, sect(secCode, vec(cat(u32(5), []byte{0x00}))))},
		{"imports ruled_meter", "ruled_meter", wasm(sect(secType, vec(ftype(nil, i32))), sect(secImport, vec(importFunc(ImportModule, ImportName, 0))))},
		{"imports a ruled_meter memory", "ruled_meter", wasm(sect(secImport, vec(cat(str(ImportModule), str("mem"), []byte{0x02, 0x00, 0x01}))))},
		{"call out of range", "function index 5 out of range", wasm(typ, fn, sect(secCode, vec(body(0, call(5)))))},
		{"export out of range", "function index 1 out of range", wasm(typ, fn, sect(secExport, vec(exportOf("x", 0, 1))), sect(secCode, vec(body(0))))},
		{"start out of range", "function index 3 out of range", wasm(typ, fn, sect(secStart, u32(3)), sect(secCode, vec(body(0))))},
		{"global out of range", "global index 0 out of range", wasm(typ, fn, sect(secCode, vec(body(0, gget(0), []byte{0x1a}))))},
		// Type indices one past the last type: the tick's type after
		// instrumentation. The first is the module on which wazero v1.12.0
		// panics (function 0 calls function 1, whose type is out of range).
		{"function type out of range", "type index 1 out of range (1 types)", wasm(typ, sect(secFunction, vec(u32(0), u32(1))), sect(secCode, vec(body(0, call(1)), body(0))))},
		{"import type out of range", "type index 1 out of range", wasm(typ, sect(secImport, vec(importFunc("env", "f", 1))))},
		{"tag type out of range", "type index 1 out of range", wasm(typ, sect(secTag, vec(cat([]byte{0x00}, u32(1)))))},
		{"call_indirect type out of range", "type index 1 out of range", wasm(typ, fn, sect(secTable, vec([]byte{0x70, 0x00, 0x01})), sect(secCode, vec(body(0, i32c(0), callIndirect(1)))))},
		{"block type out of range", "type index 1 out of range", wasm(typ, fn, sect(secCode, vec(body(0, []byte{0x02, 0x01}, end))))},
		{"loop type out of range", "type index 1 out of range", wasm(typ, fn, sect(secCode, vec(body(0, []byte{0x03, 0x01}, end))))},
		{"GC opcode", "unsupported opcode 0xfb", wasm(typ, fn, sect(secCode, vec(body(0, []byte{0xfb, 0x00, 0x00}))))},
		{"unknown 0xfc", "unsupported instruction 0xfc 99", wasm(typ, fn, sect(secCode, vec(body(0, []byte{0xfc, 99}))))},
		{"typed reference", "unsupported value type 0x64", wasm(typ, fn, sect(secCode, vec(cat(u32(4), vec(cat(u32(1), []byte{0x64, 0x70})), end))))},
		{"GC recursion group", "type 0: unsupported form 0x4e", wasm(sect(secType, vec(cat([]byte{0x4e}, vec(ftype(nil, nil), ftype(nil, nil))))))},
		{"type section trailing bytes", "unexpected bytes", wasm(sect(secType, vec(ftype(nil, nil)), []byte{0x60}))},
		{"out of order", "out of order", wasm(typ, sect(secCode, vec(body(0))), fn)},
		{"duplicate", "out of order", wasm(typ, typ)},
		{"unknown section", "unknown section id 14", wasm(sect(14))},
		{"no end", "does not end with end", wasm(typ, fn, sect(secCode, vec(cat(u32(2), []byte{0x00, 0x01}))))},
		{"trailing bytes", "unexpected bytes", wasm(typ, fn, sect(secCode, vec(body(0)), []byte{0x00}))},
	} {
		_, err := Instrument(c.bin)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

// TestTwice shows an instrumented module cannot be instrumented again: it
// imports ruled_meter.
func TestTwice(t *testing.T) {
	once := instrument(t, semanticsModule())
	if _, err := Instrument(once); err == nil || !strings.Contains(err.Error(), "ruled_meter.tick") {
		t.Errorf("Instrument(Instrument(x)) err = %v, want a refusal naming ruled_meter.tick", err)
	}
}

// TestInputUnchanged shows Instrument does not modify its argument.
func TestInputUnchanged(t *testing.T) {
	for _, bin := range [][]byte{semanticsModule(), namedModule(), tailModule()} {
		keep := bytes.Clone(bin)
		instrument(t, bin)
		if !bytes.Equal(bin, keep) {
			t.Error("Instrument changed its input")
		}
	}
}

// TestRealModules shows Go-built plugins instrument, compile and
// initialize, with the original imports plus the tick and the same exports.
func TestRealModules(t *testing.T) {
	if testing.Short() {
		t.Skip("builds Go modules")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	for _, pkg := range []string{"../../testdata/hostile", "../../../../plugins/fixedwindow/wasm"} {
		t.Run(filepath.Base(filepath.Dir(pkg))+"/"+filepath.Base(pkg), func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "m.wasm")
			cmd := exec.Command(goBin, "build", "-buildmode=c-shared", "-o", out, ".")
			cmd.Dir = pkg
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("go build %s: %v\n%s", pkg, err, msg)
			}
			orig, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			checkReal(t, orig, instrument(t, orig))
		})
	}
}

type importName struct{ mod, name string }

// checkReal compiles orig and its instrumented version, compares their
// imports and exports, and runs _initialize in both with stub imports.
func checkReal(t *testing.T, orig, inst []byte) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { rt.Close(ctx) })
	co, err := rt.CompileModule(ctx, orig)
	if err != nil {
		t.Fatalf("original: %v", err)
	}
	ci, err := rt.CompileModule(ctx, inst)
	if err != nil {
		t.Fatalf("instrumented: %v", err)
	}
	imports := func(cm wazero.CompiledModule) (names []importName) {
		for _, d := range cm.ImportedFunctions() {
			mod, name, _ := d.Import()
			names = append(names, importName{mod, name})
		}
		return names
	}
	if got, want := imports(ci), append(imports(co), importName{ImportModule, ImportName}); !slices.Equal(got, want) {
		t.Errorf("instrumented imports %v, want %v", got, want)
	}
	for name, d := range co.ExportedFunctions() {
		di := ci.ExportedFunctions()[name]
		if di == nil {
			t.Errorf("export %q missing", name)
			continue
		}
		if !slices.Equal(d.ParamTypes(), di.ParamTypes()) || !slices.Equal(d.ResultTypes(), di.ResultTypes()) || d.Name() != di.Name() {
			t.Errorf("export %q: %s%v%v became %s%v%v", name, d.Name(), d.ParamTypes(), d.ResultTypes(), di.Name(), di.ParamTypes(), di.ResultTypes())
		}
	}
	if len(co.ExportedFunctions()) != len(ci.ExportedFunctions()) {
		t.Errorf("%d exported functions became %d", len(co.ExportedFunctions()), len(ci.ExportedFunctions()))
	}
	if len(co.ExportedMemories()) != len(ci.ExportedMemories()) {
		t.Errorf("%d exported memories became %d", len(co.ExportedMemories()), len(ci.ExportedMemories()))
	}

	// WASI, a counting tick and stubs returning zeros for the other
	// imports: run the Go runtime's initialization in both.
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	var ticks atomic.Int64
	stubs := map[string]wazero.HostModuleBuilder{}
	for _, d := range ci.ImportedFunctions() {
		mod, name, _ := d.Import()
		if mod == wasi_snapshot_preview1.ModuleName {
			continue
		}
		b, ok := stubs[mod]
		if !ok {
			b = rt.NewHostModuleBuilder(mod)
			stubs[mod] = b
		}
		fn := func(_ context.Context, stack []uint64) { clear(stack) }
		if mod == ImportModule {
			fn = func(_ context.Context, stack []uint64) { ticks.Add(1); stack[0] = 1 }
		}
		b.NewFunctionBuilder().WithGoFunction(api.GoFunc(fn), d.ParamTypes(), d.ResultTypes()).Export(name)
	}
	for mod, b := range stubs {
		if _, err := b.Instantiate(ctx); err != nil {
			t.Fatalf("stub %s: %v", mod, err)
		}
	}
	// The Go runtime's initialization runs fewer than Quantum loop
	// iterations: a copy that starts counting at 1 shows its loops call
	// tick.
	hot, err := rt.CompileModule(ctx, startAtOne(t, inst))
	if err != nil {
		t.Fatalf("instrumented, counting from 1: %v", err)
	}
	for _, c := range []struct {
		name string
		cm   wazero.CompiledModule
	}{{"original", co}, {"instrumented", ci}, {"counting from 1", hot}} {
		m, err := rt.InstantiateModule(ctx, c.cm, wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize"))
		if err != nil {
			t.Errorf("%s: _initialize: %v", c.name, err)
			continue
		}
		m.Close(ctx)
	}
	if ticks.Load() == 0 {
		t.Error("the Go runtime's initialization never called tick")
	}
	t.Logf("%d bytes became %d; _initialize ticked %d times", len(orig), len(inst), ticks.Load())
}

// startAtOne returns a copy of the instrumented module inst whose count
// global starts at 1 instead of Quantum (the same number of bytes: 1 as a
// padded LEB128 number).
func startAtOne(t *testing.T, inst []byte) []byte {
	out := bytes.Clone(inst)
	r := &reader{b: out, off: len(header)}
	for r.more() {
		id := r.byte()
		size := int(r.u32())
		end := r.off + size
		if id == secGlobal {
			init := cat([]byte{0x7f, 0x01}, i32c(Quantum), []byte{0x0b})
			if r.err != nil || !bytes.HasSuffix(out[:end], init) {
				t.Fatal("the global section does not end with the count global")
			}
			copy(out[end-4:], []byte{0x81, 0x80, 0x00})
			return out
		}
		r.bytes(size)
	}
	t.Fatal("no global section")
	return nil
}

// fuzzRuntime is the runtime FuzzInstrument compiles with: the compiler
// and the features the host uses, plus tail calls.
var fuzzRuntime = sync.OnceValue(func() wazero.Runtime {
	return wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfigCompiler().WithCoreFeatures(features))
})

// plausible reports whether the vectors and strings in the parts of bin
// Instrument does not check (types, data, locals, name maps) claim no more
// entries or bytes than there are, and whether a name section has only
// well-formed subsections 0 to 2. wazero allocates for a claimed count
// before it finds it missing: gigabytes for some fuzz inputs.
func plausible(bin []byte) bool {
	r := &reader{b: bin, off: len(header)}
	// count reads a vector's length, which must not exceed the bytes left.
	count := func(p *reader) uint32 {
		n := p.u32()
		if p.err == nil && int64(n) > int64(len(p.b)-p.off) {
			p.fail(errShort)
		}
		return n
	}
	skip := &rewriter{m: &module{funcs: ^uint32(0), globals: ^uint32(0)}}
	for r.more() {
		id := r.byte()
		p := &reader{b: r.bytes(int(r.u32()))}
		if r.err != nil {
			return false
		}
		switch id {
		case secCustom:
			if p.name() != "name" {
				continue
			}
			for p.more() {
				sid := p.byte()
				sub := &reader{b: p.bytes(int(p.u32()))}
				switch sid {
				case 0:
					sub.name()
				case 1:
					for i, n := uint32(0), count(sub); i < n && sub.err == nil; i++ {
						sub.u32()
						sub.name()
					}
				case 2:
					for i, n := uint32(0), count(sub); i < n && sub.err == nil; i++ {
						sub.u32()
						for j, m := uint32(0), count(sub); j < m && sub.err == nil; j++ {
							sub.u32()
							sub.name()
						}
					}
				default:
					return false // wazero's reading of these is hard to predict
				}
				if sub.done() != nil {
					return false
				}
			}
		case secType:
			for i, n := uint32(0), count(p); i < n && p.err == nil; i++ {
				p.byte()
				p.bytes(int(count(p)))
				p.bytes(int(count(p)))
			}
		case secCode:
			for i, n := uint32(0), count(p); i < n && p.err == nil; i++ {
				b := &reader{b: p.bytes(int(p.u32()))}
				var sum uint64
				for j, m := uint32(0), count(b); j < m && b.err == nil; j++ {
					sum += uint64(b.u32())
					b.byte()
				}
				if b.err != nil || sum > 1<<16 {
					return false
				}
			}
		case secData:
			for i, n := uint32(0), count(p); i < n && p.err == nil; i++ {
				flags := p.u32()
				if flags == 2 {
					p.u32()
				}
				if flags != 1 {
					if _, err := skip.expr(p, nil); err != nil {
						return false
					}
				}
				p.bytes(int(count(p)))
			}
		case secStart, secDataCount:
		default:
			count(p)
		}
		if p.err != nil {
			return false
		}
	}
	return r.err == nil
}

// FuzzInstrument checks that Instrument never panics, and that when wazero
// compiles a module Instrument accepts, it compiles the instrumented one too.
func FuzzInstrument(f *testing.F) {
	for _, bin := range [][]byte{semanticsModule(), tailModule(), spinModule(), namedModule(), genvModule(), wasm()} {
		f.Add(bin)
	}
	// Inputs on which wazero allocated gigabytes (see plausible): a name
	// subsection, a data section and a function type claiming huge counts.
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x003\x04name0\x00\x010\xff\xff\xff\x7f00000000000000000000000'0000000000000\x1c"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\v\t\xff\xff\xff\x7f00000"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\n\x02`\xa5\xa5\xa5y\xa5000"))
	// A module on which wazero v1.12.0 panics (see host/wasm's tests).
	panics, err := os.ReadFile("../../testdata/wazero-panics.wasm")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(panics)
	f.Fuzz(func(t *testing.T, bin []byte) {
		out, err := Instrument(bin)
		if err != nil {
			return
		}
		if !plausible(bin) {
			return
		}
		ctx := context.Background()
		rt := fuzzRuntime()
		co, err := rt.CompileModule(ctx, bin)
		if err != nil {
			// The converse (wazero refuses the instrumented module when it
			// refuses the original) does not hold: wazero fails on an empty
			// custom section only when it ends the module, and instrumenting
			// appends sections. TestRefuse covers the indices that
			// instrumenting would make valid.
			return
		}
		co.Close(ctx)
		ci, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("wazero compiles the original but not the instrumented module: %v", err)
		}
		ci.Close(ctx)
		if _, err := Instrument(out); err == nil {
			t.Fatal("Instrument accepted its own output")
		}
	})
}
