package abi

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Wire helpers shared by the message codecs. Proto3 leaves fields at their
// zero value out; oneof members are always written.
//
// They run inside Wasm guests on every call, where each function call costs
// a check of the sandbox's deadline, so they are small enough to inline and
// handle one-byte tags and values without calling protowire. Every field
// number in ruled.proto is below 16, so every tag is one byte.

func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return append(b, byte(uint64(num)<<3|uint64(typ)))
}

func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// varintTag is the one-byte tag of varint field num.
func varintTag(num protowire.Number) byte { return byte(num)<<3 | byte(protowire.VarintType) }

// appendTagVarint appends a one-byte tag and a varint. It encodes the
// varint itself rather than calling protowire.AppendVarint (same bytes;
// abi_test reads them back with protobuf-go) so that it inlines with no
// call at all: inside a Go Wasm guest, where every call is expensive, a
// decision costs about 3 µs more with the call (A/B, 12 runs each).
func appendTagVarint(b []byte, tag byte, v uint64) []byte {
	b = append(b, tag)
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func appendUint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendTagVarint(b, varintTag(num), v)
}

func appendSint(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	return appendTagVarint(b, varintTag(num), protowire.EncodeZigZag(v))
}

func appendBool(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return append(appendTag(b, num, protowire.VarintType), 1)
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendStringAlways(b, num, s)
}

func appendStringAlways(b []byte, num protowire.Number, s string) []byte {
	b = appendVarint(appendTag(b, num, protowire.BytesType), uint64(len(s)))
	return append(b, s...)
}

// beginNested starts a length-delimited field whose length is not known
// yet: it writes the tag and a one-byte placeholder, and returns the
// placeholder's offset for endNested.
func beginNested(b []byte, num protowire.Number) ([]byte, int) {
	b = appendTag(b, num, protowire.BytesType)
	return append(b, 0), len(b)
}

// endNested writes the length of the field begun at mark, moving the body
// when the length needs more than one byte (bodies of 128 bytes or more).
func endNested(b []byte, mark int) []byte {
	if n := len(b) - mark - 1; n < 0x80 {
		b[mark] = byte(n)
		return b
	}
	return endLongNested(b, mark)
}

func endLongNested(b []byte, mark int) []byte {
	n := len(b) - mark - 1
	k := protowire.SizeVarint(uint64(n))
	for range k - 1 {
		b = append(b, 0)
	}
	copy(b[mark+k:], b[mark+1:mark+1+n])
	protowire.AppendVarint(b[:mark], uint64(n))
	return b
}

// field is one decoded field: its number and wire type, and its value
// (a varint, or the bytes of a length-delimited field).
type field struct {
	num   protowire.Number
	typ   protowire.Type
	u     uint64
	bytes []byte
}

// next decodes the field at the start of b and returns the rest.
// Fixed-size and group fields are skipped over (f.typ tells). A one-byte
// tag with a varint or a one-byte length, the common case, is decoded with
// at most one further call.
func next(b []byte) (f field, rest []byte, err error) {
	if len(b) >= 2 && b[0] >= 1<<3 && b[0] < 0x80 {
		f.num, f.typ = protowire.Number(b[0]>>3), protowire.Type(b[0]&7)
		switch n := int(b[1]); {
		case f.typ == protowire.VarintType && n < 0x80:
			f.u = uint64(n)
			return f, b[2:], nil
		case f.typ == protowire.VarintType:
			if v, k := protowire.ConsumeVarint(b[1:]); k > 0 {
				f.u = v
				return f, b[1+k:], nil
			}
		case f.typ == protowire.BytesType && n < 0x80 && n <= len(b)-2:
			f.bytes = b[2 : 2+n]
			return f, b[2+n:], nil
		}
	}
	return nextSlow(b)
}

func nextSlow(b []byte) (f field, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return f, nil, protowire.ParseError(n)
	}
	b = b[n:]
	f.num, f.typ = num, typ
	switch typ {
	case protowire.VarintType:
		f.u, n = protowire.ConsumeVarint(b)
	case protowire.BytesType:
		f.bytes, n = protowire.ConsumeBytes(b)
	case protowire.Fixed64Type:
		f.u, n = protowire.ConsumeFixed64(b)
	case protowire.Fixed32Type:
		var v uint32
		v, n = protowire.ConsumeFixed32(b)
		f.u = uint64(v)
	default:
		n = protowire.ConsumeFieldValue(num, typ, b)
	}
	if n < 0 {
		return f, nil, fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
	}
	return f, b[n:], nil
}

func (f *field) isVarint() bool { return f.typ == protowire.VarintType }
func (f *field) isBytes() bool  { return f.typ == protowire.BytesType }
func (f *field) sint() int64    { return protowire.DecodeZigZag(f.u) }
