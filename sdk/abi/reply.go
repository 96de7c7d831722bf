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
		b, mark := beginNested(b, replyArray)
		for i := range r.Len() {
			var m int
			b, m = beginNested(b, 1)
			b = AppendReply(b, r.Index(i))
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
// reply, where each function call and allocation is expensive: they
// allocate only strings and arrays.
func decodeReply(b []byte, depth int) (sdk.Reply, error) {
	if depth > maxDepth {
		return sdk.Reply{}, errors.New("nested too deeply")
	}
	var v sdk.Reply // the last value field wins, as in protobuf
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return sdk.Reply{}, err
		}
		b = rest
		switch {
		case f.isVarint() && f.num == replyNull:
			v = sdk.Reply{}
		case f.isVarint() && f.num == replyInt:
			v = sdk.IntReply(f.sint())
		case f.isBytes() && f.num == replyString:
			v = sdk.StringReply(string(f.bytes))
		case f.isBytes() && f.num == replyArray:
			if v, err = decodeReplyArray(f.bytes, depth+1); err != nil {
				return sdk.Reply{}, err
			}
		case f.isBytes() && f.num == replyError:
			e := &Error{}
			if e.Class, e.Message, err = decodeStringPair(f.bytes); err != nil {
				return sdk.Reply{}, err
			}
			return sdk.Reply{}, e
		}
	}
	return v, nil
}

// decodeReplyArray decodes an array's elements: into one []int64 while
// they are integers (an sdk.IntsReply, the common case), into []sdk.Reply
// from the first element that is not.
func decodeReplyArray(b []byte, depth int) (sdk.Reply, error) {
	ints := make([]int64, 0, 8)
	var arr []sdk.Reply
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return sdk.Reply{}, err
		}
		b = rest
		if f.num != 1 || !f.isBytes() {
			continue
		}
		// An element that is exactly one integer field, without decodeReply.
		if e := f.bytes; arr == nil && len(e) >= 2 && e[0] == varintTag(replyInt) {
			if len(e) == 2 && e[1] < 0x80 {
				ints = append(ints, protowire.DecodeZigZag(uint64(e[1])))
				continue
			}
			if v, n := protowire.ConsumeVarint(e[1:]); n == len(e)-1 {
				ints = append(ints, protowire.DecodeZigZag(v))
				continue
			}
		}
		e, err := decodeReply(f.bytes, depth)
		if err != nil {
			return sdk.Reply{}, err
		}
		if arr == nil {
			if e.Kind() == sdk.ReplyInt {
				n, _ := e.Int64()
				ints = append(ints, n)
				continue
			}
			arr = make([]sdk.Reply, len(ints), len(ints)+4)
			for i, n := range ints {
				arr[i] = sdk.IntReply(n)
			}
		}
		arr = append(arr, e)
	}
	if arr != nil {
		return sdk.ArrayReply(arr), nil
	}
	return sdk.IntsReply(ints...), nil
}
