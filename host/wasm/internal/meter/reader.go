package meter

import (
	"errors"
	"fmt"
)

// reader decodes the binary format. The first error sticks: later reads
// return zero values, and callers check err once after a run of reads.
type reader struct {
	b     []byte
	off   int
	err   error
	types uint32 // how many types a type index may name (see typeIndex)
}

var errShort = errors.New("unexpected end of data")

func (r *reader) more() bool { return r.err == nil && r.off < len(r.b) }

// done reports the sticky error, or an error if bytes are left over.
func (r *reader) done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%d unexpected bytes at the end", len(r.b)-r.off)
	}
	return r.err
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

func (r *reader) peek() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail(errShort)
		return 0
	}
	return r.b[r.off]
}

func (r *reader) byte() byte {
	c := r.peek()
	if r.err == nil {
		r.off++
	}
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail(errShort)
		return nil
	}
	p := r.b[r.off : r.off+n]
	r.off += n
	return p
}

// uleb reads an unsigned LEB128 number of at most bits bits.
func (r *reader) uleb(bits uint) uint64 {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits || (bits-shift < 7 && uint64(c&0x7f)>>(bits-shift) != 0) {
			r.fail(errors.New("integer too large"))
			return 0
		}
		v |= uint64(c&0x7f) << shift
		if c&0x80 == 0 {
			return v
		}
	}
}

// sleb reads a signed LEB128 number of at most bits bits.
func (r *reader) sleb(bits uint) int64 {
	var v int64
	shift := uint(0)
	for {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if shift >= bits {
			r.fail(errors.New("integer too large"))
			return 0
		}
		v |= int64(c&0x7f) << shift
		shift += 7
		if c&0x80 == 0 {
			if shift < 64 && c&0x40 != 0 {
				v |= -1 << shift
			}
			return v
		}
	}
}

func (r *reader) u32() uint32 { return uint32(r.uleb(32)) }

func (r *reader) name() string { return string(r.bytes(int(r.u32()))) }

// valType reads a value type. Reference types with a heap type (function
// references and GC) are refused: no engine ruled runs supports them.
func (r *reader) valType() {
	switch c := r.byte(); c {
	case 0x7f, 0x7e, 0x7d, 0x7c, 0x7b, 0x70, 0x6f, 0x69:
	default:
		if r.err == nil {
			r.fail(fmt.Errorf("unsupported value type %#x", c))
		}
	}
}

func (r *reader) limits() {
	flags := r.byte()
	if flags&^0x07 != 0 {
		r.fail(fmt.Errorf("unsupported limits flags %#x", flags))
		return
	}
	if flags&0x04 != 0 { // 64-bit
		r.uleb(64)
		if flags&0x01 != 0 {
			r.uleb(64)
		}
		return
	}
	r.u32()
	if flags&0x01 != 0 {
		r.u32()
	}
}

// blockType reads a block type: empty, a value type or a type index.
func (r *reader) blockType() {
	switch c := r.peek(); {
	case r.err != nil:
	case c == 0x40:
		r.byte()
	case c&0xc0 == 0x40: // a one-byte negative number: a value type
		r.valType()
	default:
		if i := r.sleb(33); i < 0 {
			r.fail(errors.New("bad block type"))
		} else {
			r.checkType(uint64(i))
		}
	}
}

// typeIndex reads a type index, refusing one past the module's types: the
// instrumented module appends the tick's type there, which would make an
// invalid module valid (and wazero v1.12.0 panics compiling a call to a
// function whose type index is out of range).
func (r *reader) typeIndex() uint32 {
	i := r.u32()
	r.checkType(uint64(i))
	return i
}

func (r *reader) checkType(i uint64) {
	if r.err == nil && i >= uint64(r.types) {
		r.fail(fmt.Errorf("type index %d out of range (%d types)", i, r.types))
	}
}

// memarg reads alignment (with the multi-memory flag), memory and offset.
func (r *reader) memarg() {
	align := r.u32()
	if align&0x40 != 0 {
		r.u32()
	}
	r.uleb(64)
}

// immediates skips the immediates of instruction op, which has been read.
// Instructions the rewrite changes (calls, ref.func, loop) and end are
// handled by the caller.
func (r *reader) immediates(op byte) error {
	switch {
	case op == 0x00, op == 0x01, op == 0x05, op == 0x0a, op == 0x0f, op == 0x19,
		op == 0x1a, op == 0x1b, op == 0xd1, op >= 0x45 && op <= 0xc4:
		// no immediates
	case op == 0x02, op == 0x04, op == 0x06: // block, if, try
		r.blockType()
	case op == 0x07, op == 0x08, op == 0x09, op == 0x0c, op == 0x0d, op == 0x18, // catch, throw, rethrow, br, br_if, delegate
		op >= 0x20 && op <= 0x26, // local.*, global.*, table.get/set
		op == 0x3f, op == 0x40:   // memory.size/grow
		r.u32()
	case op == 0x0e: // br_table
		n := r.u32()
		for i := uint32(0); i <= n && r.err == nil; i++ {
			r.u32()
		}
	case op == 0x11, op == 0x13: // call_indirect, return_call_indirect
		r.typeIndex()
		r.u32()
	case op == 0x1c: // select t*
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			r.valType()
		}
	case op == 0x1f: // try_table
		r.blockType()
		n := r.u32()
		for i := uint32(0); i < n && r.err == nil; i++ {
			switch kind := r.byte(); kind {
			case 0x00, 0x01: // catch, catch_ref: tag, label
				r.u32()
				r.u32()
			case 0x02, 0x03: // catch_all, catch_all_ref: label
				r.u32()
			default:
				r.fail(fmt.Errorf("unknown catch kind %#x", kind))
			}
		}
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x41:
		r.sleb(32)
	case op == 0x42:
		r.sleb(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0: // ref.null heaptype
		if c := r.peek(); r.err == nil && c != 0x70 && c != 0x6f && c != 0x69 {
			return fmt.Errorf("ref.null of unsupported heap type %#x", c)
		}
		r.byte()
	case op == 0xfc:
		r.misc()
	case op == 0xfd:
		r.simd()
	case op == 0xfe:
		r.atomic()
	default:
		return fmt.Errorf("unsupported opcode %#x", op)
	}
	return r.err
}

// misc skips the 0xFC-prefixed instructions: saturating truncation, bulk
// memory and table instructions.
func (r *reader) misc() {
	switch sub := r.u32(); {
	case sub <= 7: // trunc_sat
	case sub == 8, sub == 10, sub == 12, sub == 14: // memory.init, memory.copy, table.init, table.copy
		r.u32()
		r.u32()
	case sub == 9, sub == 11, sub == 13, sub >= 15 && sub <= 17: // data.drop, memory.fill, elem.drop, table.grow/size/fill
		r.u32()
	default:
		r.fail(fmt.Errorf("unsupported instruction 0xfc %d", sub))
	}
}

// simd skips the 0xFD-prefixed (128-bit SIMD) instructions.
func (r *reader) simd() {
	switch sub := r.u32(); {
	case sub <= 0x0b, sub == 0x5c, sub == 0x5d: // loads, store, load_zero
		r.memarg()
	case sub == 0x0c, sub == 0x0d: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 0x15 && sub <= 0x22: // extract_lane, replace_lane
		r.byte()
	case sub >= 0x54 && sub <= 0x5b: // load_lane, store_lane
		r.memarg()
		r.byte()
	case sub <= 0x113: // no immediates (relaxed SIMD included)
	default:
		r.fail(fmt.Errorf("unsupported instruction 0xfd %d", sub))
	}
}

// atomic skips the 0xFE-prefixed (threads) instructions.
func (r *reader) atomic() {
	switch sub := r.u32(); {
	case sub == 0x03: // atomic.fence
		r.byte()
	case sub <= 0x02, sub >= 0x10 && sub <= 0x4e:
		r.memarg()
	default:
		r.fail(fmt.Errorf("unsupported instruction 0xfe %d", sub))
	}
}

// skipU32 returns p after its leading LEB128 number.
func skipU32(p []byte) []byte {
	r := &reader{b: p}
	r.u32()
	return p[r.off:]
}

func appendU32(out []byte, v uint32) []byte {
	for v >= 0x80 {
		out = append(out, byte(v)|0x80)
		v >>= 7
	}
	return append(out, byte(v))
}

func appendS64(out []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(out, c)
		}
		out = append(out, c|0x80)
	}
}

func appendName(out []byte, s string) []byte {
	out = appendU32(out, uint32(len(s)))
	return append(out, s...)
}
