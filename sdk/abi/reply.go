package abi

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ruled-dev/ruled/sdk"
)

// Reply field numbers (ruled.proto).
const (
	replyNull   = 1
	replyInt    = 2
	replyString = 3
	replyArray  = 4
	replyError  = 5
)

// AppendReply appends r encoded as a Reply message.
func AppendReply(b []byte, r sdk.Reply) []byte {
	switch r.Kind() {
	case sdk.ReplyInt:
		n, _ := r.Int64()
		b = appendTag(b, replyInt, protowire.VarintType)
		return appendVarint(b, protowire.EncodeZigZag(n))
	case sdk.ReplyString:
		str, _ := r.Str()
		return appendStringAlways(b, replyString, str)
	case sdk.ReplyArray:
		arr, _ := r.Array()
		b, mark := beginNested(b, replyArray)
		for _, e := range arr {
			var m int
			b, m = beginNested(b, 1)
			b = AppendReply(b, e)
			b = endNested(b, m)
		}
		return endNested(b, mark)
	default: // nil
		b = appendTag(b, replyNull, protowire.VarintType)
		return append(b, 1)
	}
}

// AppendReplyError appends e encoded as a Reply message carrying an error.
func AppendReplyError(b []byte, e *Error) []byte {
	b, mark := beginNested(b, replyError)
	b = appendString(b, 1, e.Class)
	b = appendString(b, 2, e.Message)
	return endNested(b, mark)
}

// DecodeReply decodes a Reply message. A reply that carries an error
// returns it as an *Error.
func DecodeReply(b []byte) (sdk.Reply, error) {
	r, err := decodeReply(b, 0)
	if err != nil {
		var e *Error
		if !errors.As(err, &e) {
			err = fmt.Errorf("abi: Reply: %w", err)
		}
	}
	return r, err
}

// decodeReply and decodeReplyArray run inside Wasm guests for every script
// reply, where each function call and allocation is expensive, so they
// decode inline rather than through next, and allocate only strings and
// arrays.
func decodeReply(b []byte, depth int) (sdk.Reply, error) {
	if depth > maxDepth {
		return sdk.Reply{}, errors.New("nested too deeply")
	}
	var v sdk.Reply // the last value field wins, as in protobuf
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return sdk.Reply{}, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.VarintType:
			var u uint64
			if u, n = protowire.ConsumeVarint(b); n < 0 {
				return sdk.Reply{}, protowire.ParseError(n)
			}
			switch num {
			case replyNull:
				v = sdk.Reply{}
			case replyInt:
				v = sdk.IntReply(protowire.DecodeZigZag(u))
			}
		case typ == protowire.BytesType:
			var body []byte
			if body, n = protowire.ConsumeBytes(b); n < 0 {
				return sdk.Reply{}, protowire.ParseError(n)
			}
			switch num {
			case replyString:
				v = sdk.StringReply(string(body))
			case replyArray:
				arr, err := decodeReplyArray(body, depth+1)
				if err != nil {
					return sdk.Reply{}, err
				}
				v = sdk.ArrayReply(arr)
			case replyError:
				e := &Error{}
				var err error
				if e.Class, e.Message, err = decodeStringPair(body); err != nil {
					return sdk.Reply{}, err
				}
				return sdk.Reply{}, e
			}
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return sdk.Reply{}, protowire.ParseError(n)
			}
		}
		b = b[n:]
	}
	return v, nil
}

func decodeReplyArray(b []byte, depth int) ([]sdk.Reply, error) {
	arr := make([]sdk.Reply, 0, 8)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		if num != 1 || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		body, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		e, err := decodeReply(body, depth)
		if err != nil {
			return nil, err
		}
		arr = append(arr, e)
	}
	return arr, nil
}
