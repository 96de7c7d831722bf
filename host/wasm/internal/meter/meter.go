// Package meter rewrites a WebAssembly module so that a long-running guest
// calls back into its host at regular intervals, where the host can stop it.
//
// wazero stops a guest whose context is done only if the module was compiled
// with interruptibility on, and then it leaves the machine code for Go at
// every loop iteration. Go's Wasm backend enters a loop at every function
// call and every taken branch, so a Go guest pays that exit thousands of times
// per call: most of its cost. Instrument instead counts down a private global
// at every loop header (and on entry to functions that make tail calls) and
// calls the host only when the count reaches zero, once every Quantum
// iterations; the host checks the call's deadline there and aborts the call
// when it has passed. Between checks the guest runs a decrement and a branch
// per iteration in machine code.
//
// The rewritten module imports one more function, ImportModule.ImportName
// with signature () -> i32, which returns the next count (normally
// Quantum). A module may not import that function itself. Function indices
// of the module's own functions shift by one everywhere they appear (calls,
// exports, the start function, element segments, ref.func, the name
// section). Custom sections that locate code by byte offset (DWARF, code
// metadata) are dropped because the offsets change.
package meter

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

const (
	// ImportModule and ImportName name the host function an instrumented
	// module calls when its count reaches zero.
	ImportModule = "ruled_meter"
	ImportName   = "tick"
	// Quantum is the count the host should return from the tick function:
	// function entries and loop iterations between two checks. A tight loop
	// runs it in well under a millisecond, so an expired deadline is noticed
	// soon and Go's garbage collector never waits long for a guest.
	Quantum = 1 << 14
)

// Section ids and their order in a module (custom sections aside).
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
	secTag       = 13
)

// order is each known section's position in a valid module.
var order = map[byte]int{
	secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5, secTag: 6,
	secGlobal: 7, secExport: 8, secStart: 9, secElement: 10, secDataCount: 11, secCode: 12, secData: 13,
}

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// section is one section of a module, payload without id and size.
type section struct {
	id      byte
	payload []byte
}

// module is what the rewrite needs to know about a module.
type module struct {
	sections      []section
	types         uint32 // entries of the type section
	funcImports   uint32 // imported functions: the first function indices
	globalImports uint32 // imported globals
	globals       uint32 // imported and defined globals
	funcs         uint32 // imported and defined functions
}

// Instrument returns a copy of the binary module bin that counts down a
// private global at every loop header (and on entry to functions that make
// tail calls) and calls
// ImportModule.ImportName whenever the count reaches zero. bin itself is not
// changed. An error means bin is not a module Instrument understands (a
// malformed module, or a proposal it does not know); the message names the
// place.
func Instrument(bin []byte) ([]byte, error) {
	m, err := parse(bin)
	if err != nil {
		return nil, err
	}
	return m.instrument()
}

func parse(bin []byte) (*module, error) {
	if !bytes.HasPrefix(bin, header) {
		return nil, errors.New("meter: not a WebAssembly 1.0 binary module")
	}
	r := &reader{b: bin, off: len(header)}
	m := &module{}
	last := 0
	for r.more() {
		id := r.byte()
		size := r.u32()
		start := r.off
		payload := r.bytes(int(size))
		if r.err != nil {
			return nil, fmt.Errorf("meter: section %d at byte %d: %w", id, start, r.err)
		}
		if id != secCustom {
			pos, ok := order[id]
			if !ok {
				return nil, fmt.Errorf("meter: unknown section id %d at byte %d", id, start)
			}
			if pos <= last {
				return nil, fmt.Errorf("meter: section %d out of order at byte %d", id, start)
			}
			last = pos
		}
		m.sections = append(m.sections, section{id, payload})
		if err := m.count(id, payload); err != nil {
			return nil, fmt.Errorf("meter: section %d: %w", id, err)
		}
	}
	return m, nil
}

// count records the index-space sizes a section contributes.
func (m *module) count(id byte, payload []byte) error {
	r := &reader{b: payload, types: m.types}
	switch id {
	case secType:
		// The tick's type is appended as type m.types: every entry must be
		// one type (no recursion groups or subtypes of the GC proposal).
		m.types = r.u32()
		for i := uint32(0); i < m.types && r.err == nil; i++ {
			if form := r.byte(); r.err == nil && form != 0x60 {
				return fmt.Errorf("type %d: unsupported form %#x", i, form)
			}
			for range 2 { // parameters, results
				for j, n := uint32(0), r.u32(); j < n && r.err == nil; j++ {
					r.valType()
				}
			}
		}
		if r.err == nil {
			return r.done()
		}
	case secImport:
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			mod, name := r.name(), r.name()
			if mod == ImportModule {
				return fmt.Errorf("import %s.%s: module %s is ruled's own", mod, name, ImportModule)
			}
			switch kind := r.byte(); kind {
			case 0x00: // function: type index
				r.typeIndex()
				m.funcImports++
			case 0x01: // table: reftype, limits
				r.valType()
				r.limits()
			case 0x02: // memory: limits
				r.limits()
			case 0x03: // global: valtype, mutability
				r.valType()
				r.byte()
				m.globalImports++
			case 0x04: // tag: attribute, type index
				r.byte()
				r.typeIndex()
			default:
				return fmt.Errorf("import %s.%s: unknown kind %#x", mod, name, kind)
			}
		}
		m.funcs, m.globals = m.funcImports, m.globalImports
	case secFunction:
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.typeIndex()
		}
		m.funcs = m.funcImports + n
	case secGlobal:
		m.globals = m.globalImports + r.u32()
	case secTag:
		for i, n := uint32(0), r.u32(); i < n && r.err == nil; i++ {
			r.byte() // attribute
			r.typeIndex()
		}
	}
	return r.err
}

func (m *module) instrument() ([]byte, error) {
	fuel := m.globals     // index of the count global, appended
	tick := m.funcImports // index of the tick import, appended to the imports
	rw := &rewriter{m: m, fuel: fuel, tick: tick}

	out := append([]byte(nil), header...)
	put := func(id byte, payload []byte) {
		out = append(out, id)
		out = appendU32(out, uint32(len(payload)))
		out = append(out, payload...)
	}
	// added are the sections the module lacks that the rewrite needs.
	added := map[byte][]byte{
		secType:   rw.types(nil),
		secImport: rw.imports(nil),
		secGlobal: rw.globals(nil),
	}
	emitAdded := func(before int) {
		for _, id := range []byte{secType, secImport, secGlobal} {
			if p, ok := added[id]; ok && order[id] < before {
				put(id, p)
				delete(added, id)
			}
		}
	}
	for _, s := range m.sections {
		if s.id == secCustom {
			p, keep, err := rw.custom(s.payload)
			if err != nil {
				return nil, err
			}
			if keep {
				put(s.id, p)
			}
			continue
		}
		emitAdded(order[s.id])
		var p []byte
		var err error
		switch s.id {
		case secType:
			p = rw.types(s.payload)
			delete(added, secType)
		case secImport:
			p = rw.imports(s.payload)
			delete(added, secImport)
		case secGlobal:
			p, err = rw.globalSection(s.payload)
			delete(added, secGlobal)
		case secTable:
			p, err = rw.tables(s.payload)
		case secExport:
			p, err = rw.exports(s.payload)
		case secStart:
			p, err = rw.start(s.payload)
		case secElement:
			p, err = rw.elements(s.payload)
		case secCode:
			p, err = rw.code(s.payload)
		default:
			p = s.payload
		}
		if err != nil {
			return nil, fmt.Errorf("meter: section %d: %w", s.id, err)
		}
		put(s.id, p)
	}
	emitAdded(len(order) + 1)
	return out, nil
}

// rewriter rewrites sections of one module.
type rewriter struct {
	m    *module
	fuel uint32 // the count global
	tick uint32 // the tick function

	tailCalls bool // the function being rewritten makes tail calls
}

// fn maps one of the module's function indices to the rewritten module's.
func (rw *rewriter) fn(idx uint32) (uint32, error) {
	switch {
	case idx >= rw.m.funcs:
		return 0, fmt.Errorf("function index %d out of range (%d functions)", idx, rw.m.funcs)
	case idx >= rw.tick:
		return idx + 1, nil
	}
	return idx, nil
}

// types appends the tick function's type, () -> i32, to a type section.
func (rw *rewriter) types(payload []byte) []byte {
	var out []byte
	out = appendU32(out, rw.m.types+1)
	if len(payload) > 0 {
		out = append(out, skipU32(payload)...)
	}
	return append(out, 0x60, 0x00, 0x01, 0x7f)
}

// imports appends the tick import, whose type is the last one.
func (rw *rewriter) imports(payload []byte) []byte {
	var out []byte
	var n uint32
	var rest []byte
	if len(payload) > 0 {
		r := &reader{b: payload}
		n = r.u32()
		rest = payload[r.off:]
	}
	out = appendU32(out, n+1)
	out = append(out, rest...)
	out = appendName(out, ImportModule)
	out = appendName(out, ImportName)
	out = append(out, 0x00)
	return appendU32(out, rw.m.types)
}

// globals appends the count global: a mutable i32 that starts at Quantum.
func (rw *rewriter) globals(entries []byte) []byte {
	n := rw.m.globals - rw.m.globalImports
	out := appendU32(nil, n+1)
	out = append(out, entries...)
	out = append(out, 0x7f, 0x01, 0x41)
	out = appendS64(out, Quantum)
	return append(out, 0x0b)
}

func (rw *rewriter) globalSection(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	var entries []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		start := r.off
		r.valType()
		r.byte()
		entries = append(entries, payload[start:r.off]...)
		var err error
		if entries, err = rw.expr(r, entries); err != nil {
			return nil, fmt.Errorf("global %d: %w", i, err)
		}
	}
	if err := r.done(); err != nil {
		return nil, err
	}
	return rw.globals(entries), nil
}

// tables rewrites table initializers (function references).
func (rw *rewriter) tables(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		start := r.off
		if r.peek() == 0x40 { // table with an initializer: 0x40 0x00 tabletype expr
			r.byte()
			r.byte()
			r.valType()
			r.limits()
			out = append(out, payload[start:r.off]...)
			var err error
			if out, err = rw.expr(r, out); err != nil {
				return nil, fmt.Errorf("table %d: %w", i, err)
			}
			continue
		}
		r.valType()
		r.limits()
		out = append(out, payload[start:r.off]...)
	}
	return out, r.done()
}

func (rw *rewriter) exports(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		name := r.name()
		kind := r.byte()
		idx := r.u32()
		if kind == 0x00 {
			var err error
			if idx, err = rw.fn(idx); err != nil {
				return nil, fmt.Errorf("export %q: %w", name, err)
			}
		}
		out = appendName(out, name)
		out = append(out, kind)
		out = appendU32(out, idx)
	}
	return out, r.done()
}

func (rw *rewriter) start(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	idx, err := rw.fn(r.u32())
	if err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return appendU32(nil, idx), r.done()
}

// elements rewrites the function indices and expressions of element
// segments, in all eight encodings.
func (rw *rewriter) elements(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := appendU32(nil, n)
	for i := uint32(0); i < n && r.err == nil; i++ {
		flags := r.u32()
		if flags > 7 {
			return nil, fmt.Errorf("element segment %d: unknown flags %d", i, flags)
		}
		out = appendU32(out, flags)
		var err error
		if flags&0x02 != 0 && flags&0x01 == 0 { // explicit table index
			out = appendU32(out, r.u32())
		}
		if flags&0x01 == 0 { // active: offset expression
			if out, err = rw.expr(r, out); err != nil {
				return nil, fmt.Errorf("element segment %d: %w", i, err)
			}
		}
		if flags&0x03 != 0 { // elemkind or reftype
			out = append(out, r.byte())
		}
		count := r.u32()
		out = appendU32(out, count)
		for j := uint32(0); j < count && r.err == nil; j++ {
			if flags&0x04 != 0 {
				out, err = rw.expr(r, out)
			} else {
				var idx uint32
				idx, err = rw.fn(r.u32())
				out = appendU32(out, idx)
			}
			if err != nil {
				return nil, fmt.Errorf("element segment %d: %w", i, err)
			}
		}
	}
	return out, r.done()
}

// code instruments every function body.
func (rw *rewriter) code(payload []byte) ([]byte, error) {
	r := &reader{b: payload}
	n := r.u32()
	out := appendU32(nil, n)
	var body []byte
	for i := uint32(0); i < n && r.err == nil; i++ {
		size := r.u32()
		b := &reader{b: r.bytes(int(size)), types: rw.m.types}
		if r.err != nil {
			break
		}
		body = body[:0]
		groups := b.u32()
		for j := uint32(0); j < groups && b.err == nil; j++ {
			b.u32()
			b.valType()
		}
		if b.err != nil {
			return nil, fmt.Errorf("function %d: locals: %w", rw.m.funcImports+i, b.err)
		}
		locals := b.b[:b.off]
		var err error
		rw.tailCalls = false
		if body, err = rw.instructions(b, body[:0], true); err != nil {
			return nil, fmt.Errorf("function %d: %w", rw.m.funcImports+i, err)
		}
		// A cycle of tail calls is a loop without a loop instruction: a
		// function that makes tail calls counts down on entry too. (Other
		// recursion ends when the stack runs out.)
		var entry []byte
		if rw.tailCalls {
			entry = rw.check(nil)
		}
		out = appendU32(out, uint32(len(locals)+len(entry)+len(body)))
		out = append(out, locals...)
		out = append(out, entry...)
		out = append(out, body...)
	}
	return out, r.done()
}

// check appends the count-down: when the count is zero, set it to the
// result of tick; then subtract one.
func (rw *rewriter) check(out []byte) []byte {
	out = append(out, 0x23) // global.get
	out = appendU32(out, rw.fuel)
	out = append(out, 0x45, 0x04, 0x40, 0x10) // i32.eqz, if (no result), call
	out = appendU32(out, rw.tick)
	out = append(out, 0x24) // global.set
	out = appendU32(out, rw.fuel)
	out = append(out, 0x0b, 0x23) // end, global.get
	out = appendU32(out, rw.fuel)
	out = append(out, 0x41, 0x01, 0x6b, 0x24) // i32.const 1, i32.sub, global.set
	return appendU32(out, rw.fuel)
}

// expr copies a constant expression up to and including its end.
func (rw *rewriter) expr(r *reader, out []byte) ([]byte, error) {
	return rw.instructions(r, out, false)
}

// instructions copies instructions from r to out, mapping function indices
// and, in a function body (body), inserting the count-down after every loop
// header. It stops at the end of r in a body, and after the first end
// otherwise (a constant expression).
func (rw *rewriter) instructions(r *reader, out []byte, body bool) ([]byte, error) {
	var last byte // the last opcode read
	for r.err == nil {
		if body && !r.more() {
			if last != 0x0b {
				return nil, errors.New("body does not end with end")
			}
			return out, nil
		}
		at := r.off
		op := r.byte()
		if r.err != nil {
			break
		}
		last = op
		switch op {
		case 0x10, 0x12, 0xd2: // call, return_call, ref.func
			rw.tailCalls = rw.tailCalls || op == 0x12
			idx, err := rw.fn(r.u32())
			if err != nil {
				return nil, fmt.Errorf("at byte %d: %w", at, err)
			}
			out = append(out, op)
			out = appendU32(out, idx)
			continue
		case 0x23, 0x24: // global.get, global.set
			if idx := r.u32(); r.err == nil && idx >= rw.m.globals {
				return nil, fmt.Errorf("at byte %d: global index %d out of range (%d globals)", at, idx, rw.m.globals)
			}
		case 0x03: // loop
			r.blockType()
			out = append(out, r.b[at:r.off]...)
			out = rw.check(out)
			continue
		case 0x0b:
			if !body {
				return append(out, op), nil
			}
		case 0x13: // return_call_indirect
			rw.tailCalls = true
			r.typeIndex()
			r.u32()
		default:
			if err := r.immediates(op); err != nil {
				return nil, fmt.Errorf("at byte %d: %w", at, err)
			}
		}
		out = append(out, r.b[at:r.off]...)
	}
	if r.err == nil {
		r.err = errors.New("unexpected end")
	}
	return nil, r.err
}

// custom rewrites the name section's function indices and drops sections
// that locate code by byte offset; other custom sections are kept as they
// are.
func (rw *rewriter) custom(payload []byte) (_ []byte, keep bool, err error) {
	r := &reader{b: payload}
	name := r.name()
	if r.err != nil {
		return nil, false, fmt.Errorf("meter: custom section: %w", r.err)
	}
	switch {
	case strings.HasPrefix(name, ".debug_"), strings.HasPrefix(name, "metadata.code."), name == "sourceMappingURL":
		return nil, false, nil
	case name != "name":
		return payload, true, nil
	}
	out, err := rw.names(r, append([]byte(nil), payload[:r.off]...))
	if err != nil {
		// The name section is only for debugging: drop it rather than fail.
		return nil, false, nil
	}
	return out, true, nil
}

// names rewrites the function indices of the name section's function names
// (1), local names (2) and label names (3); other subsections are kept.
func (rw *rewriter) names(r *reader, out []byte) ([]byte, error) {
	for r.more() && r.err == nil {
		id := r.byte()
		sub := &reader{b: r.bytes(int(r.u32()))}
		if r.err != nil {
			break
		}
		if id < 1 || id > 3 {
			out = append(out, id)
			out = appendU32(out, uint32(len(sub.b)))
			out = append(out, sub.b...)
			continue
		}
		n := sub.u32()
		p := appendU32(nil, n)
		for i := uint32(0); i < n && sub.err == nil; i++ {
			idx, err := rw.fn(sub.u32())
			if err != nil {
				return nil, err
			}
			p = appendU32(p, idx)
			start := sub.off
			if id == 1 {
				sub.name()
			} else { // a name map per function
				m := sub.u32()
				for j := uint32(0); j < m && sub.err == nil; j++ {
					sub.u32()
					sub.name()
				}
			}
			p = append(p, sub.b[start:sub.off]...)
		}
		if err := sub.done(); err != nil {
			return nil, err
		}
		out = append(out, id)
		out = appendU32(out, uint32(len(p)))
		out = append(out, p...)
	}
	return out, r.done()
}
