package abi

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Value field numbers (ruled.proto).
const (
	valueNull     = 1
	valueInt      = 2
	valueUint     = 3
	valueFloat    = 4
	valueString   = 5
	valueBytes    = 6
	valueBool     = 7
	valueList     = 8
	valueMap      = 9
	valueDuration = 10
	valueField    = 11
)

// maxDepth bounds the nesting of decoded values and replies.
const maxDepth = 64

// AppendValue appends v encoded as a Value message. v may be nil, a bool,
// any Go integer or float type, a string, a []byte, a time.Duration, a
// []any or a map[string]any of those: what a YAML rule config decodes to.
func AppendValue(b []byte, v any) ([]byte, error) { return appendValue(b, v, 0) }

func appendValue(b []byte, v any, depth int) ([]byte, error) {
	if depth > maxDepth {
		return b, errors.New("abi: value nested too deeply")
	}
	switch t := v.(type) {
	case nil:
		b = appendTag(b, valueNull, protowire.VarintType)
		return append(b, 1), nil
	case bool:
		b = appendTag(b, valueBool, protowire.VarintType)
		if t {
			return append(b, 1), nil
		}
		return append(b, 0), nil
	case int:
		return appendIntValue(b, int64(t)), nil
	case int8:
		return appendIntValue(b, int64(t)), nil
	case int16:
		return appendIntValue(b, int64(t)), nil
	case int32:
		return appendIntValue(b, int64(t)), nil
	case int64:
		return appendIntValue(b, t), nil
	case uint:
		return appendUintValue(b, uint64(t)), nil
	case uint8:
		return appendUintValue(b, uint64(t)), nil
	case uint16:
		return appendUintValue(b, uint64(t)), nil
	case uint32:
		return appendUintValue(b, uint64(t)), nil
	case uint64:
		return appendUintValue(b, t), nil
	case float32:
		return appendFloatValue(b, float64(t)), nil
	case float64:
		return appendFloatValue(b, t), nil
	case string:
		return appendStringAlways(b, valueString, t), nil
	case []byte:
		b = appendTag(b, valueBytes, protowire.BytesType)
		return protowire.AppendBytes(b, t), nil
	case time.Duration:
		b = appendTag(b, valueDuration, protowire.VarintType)
		return appendVarint(b, protowire.EncodeZigZag(int64(t))), nil
	case []any:
		b, outer := beginNested(b, valueList)
		for _, e := range t {
			var mark int
			var err error
			b, mark = beginNested(b, 1)
			if b, err = appendValue(b, e, depth+1); err != nil {
				return b, err
			}
			b = endNested(b, mark)
		}
		return endNested(b, outer), nil
	case map[string]any:
		b, mark := beginNested(b, valueMap)
		b, err := appendValueMapFields(b, t, depth+1)
		if err != nil {
			return b, err
		}
		return endNested(b, mark), nil
	}
	return b, fmt.Errorf("abi: cannot encode a value of type %T", v)
}

func appendIntValue(b []byte, v int64) []byte {
	return appendTagVarint(b, varintTag(valueInt), protowire.EncodeZigZag(v))
}

func appendUintValue(b []byte, v uint64) []byte {
	if v <= math.MaxInt64 {
		return appendIntValue(b, int64(v))
	}
	b = appendTag(b, valueUint, protowire.VarintType)
	return appendVarint(b, v)
}

func appendFloatValue(b []byte, v float64) []byte {
	b = appendTag(b, valueFloat, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// appendValueMapFields appends the fields of a ValueMap message: one map
// entry {1: key, 2: value} per element.
func appendValueMapFields(b []byte, m map[string]any, depth int) ([]byte, error) {
	for k, v := range m {
		var entry, val int
		var err error
		b, entry = beginNested(b, 1)
		b = appendStringAlways(b, 1, k)
		b, val = beginNested(b, 2)
		if b, err = appendValue(b, v, depth); err != nil {
			return b, fmt.Errorf("%s: %w", k, err)
		}
		b = endNested(b, val)
		b = endNested(b, entry)
	}
	return b, nil
}

// DecodeValue decodes a Value message. Integers become int (uint64 above
// the int64 range), floats float64, durations time.Duration, lists []any,
// maps map[string]any, null nil.
func DecodeValue(b []byte) (any, error) { return decodeValue(b, 0) }

func decodeValue(b []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errors.New("abi: value nested too deeply")
	}
	var v any
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, fmt.Errorf("abi: value: %w", err)
		}
		b = rest
		switch {
		case f.num == valueNull && f.isVarint():
			v = nil
		case f.num == valueInt && f.isVarint():
			v = int(f.sint())
		case f.num == valueUint && f.isVarint():
			if f.u <= math.MaxInt64 {
				v = int(f.u)
			} else {
				v = f.u
			}
		case f.num == valueFloat && f.typ == protowire.Fixed64Type:
			v = math.Float64frombits(f.u)
		case f.num == valueString && f.isBytes():
			v = string(f.bytes)
		case f.num == valueBytes && f.isBytes():
			v = append([]byte{}, f.bytes...)
		case f.num == valueBool && f.isVarint():
			v = f.u != 0
		case f.num == valueDuration && f.isVarint():
			v = time.Duration(f.sint())
		case f.num == valueList && f.isBytes():
			if v, err = decodeValueList(f.bytes, depth+1); err != nil {
				return nil, err
			}
		case f.num == valueMap && f.isBytes():
			if v, err = decodeValueMap(f.bytes, depth+1); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}

func decodeValueList(b []byte, depth int) ([]any, error) {
	out := []any{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, fmt.Errorf("abi: list: %w", err)
		}
		b = rest
		if f.num != 1 || !f.isBytes() {
			continue
		}
		e, err := decodeValue(f.bytes, depth)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// decodeValueMap decodes the fields of a ValueMap message.
func decodeValueMap(b []byte, depth int) (map[string]any, error) {
	out := map[string]any{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, fmt.Errorf("abi: map: %w", err)
		}
		b = rest
		if f.num != 1 || !f.isBytes() {
			continue
		}
		var key string
		var val any
		for e := f.bytes; len(e) > 0; {
			g, rest, err := next(e)
			if err != nil {
				return nil, fmt.Errorf("abi: map entry: %w", err)
			}
			e = rest
			switch {
			case g.num == 1 && g.isBytes():
				key = string(g.bytes)
			case g.num == 2 && g.isBytes():
				if val, err = decodeValue(g.bytes, depth); err != nil {
					return nil, fmt.Errorf("%s: %w", key, err)
				}
			}
		}
		out[key] = val
	}
	return out, nil
}
