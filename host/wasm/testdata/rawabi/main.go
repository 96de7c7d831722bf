// Command rawabi implements ABI v1 by hand, without sdk/guest, and breaks
// it on request: the subject of a decision picks the fault, the config's
// "template" a malformed template.
package main

import (
	"unsafe"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

func main() {}

var in, out []byte

func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)])))) }

//go:wasmexport ruled_abi_v1
func abiV1() {}

//go:wasmexport ruled_buf
func buf(size uint32) uint32 {
	if size > 1<<20 {
		return 0xFFFF0000 // a buffer far outside memory
	}
	if uint32(cap(in)) < size {
		in = make([]byte, size)
	}
	return addr(in)
}

//go:wasmexport ruled_init
func initialize(ptr, n uint32) uint64 {
	info := sdk.Info{Name: "rawabi", Version: "1"}
	out = abi.AppendInfo(out[:0], &info, false)
	return abi.Pack(addr(out), uint32(len(out)))
}

// badTemplates are ConfigureResponses, encoded by hand as a guest in
// another language would, whose template the host must refuse: by the
// config's "template".
var badTemplates = map[string][]byte{
	// template {decides: true}: no call.
	"no-call": {0x12, 0x02, 0x28, 0x01},
	// template {call {script "decide", args [request_field 9]}}.
	"unknown-field": {0x12, 0x0e, 0x22, 0x0c, 0x0a, 0x06, 'd', 'e', 'c', 'i', 'd', 'e', 0x1a, 0x02, 0x58, 0x09},
}

//go:wasmexport ruled_configure
func configure(ptr, n uint32) uint64 {
	var req abi.ConfigureRequest
	if err := req.Decode(in[:n]); err != nil {
		return 0
	}
	if mode, _ := req.Config["template"].(string); badTemplates[mode] != nil {
		out = append(out[:0], badTemplates[mode]...)
	} else {
		out, _ = (&abi.ConfigureResponse{}).Append(out[:0])
	}
	return abi.Pack(addr(out), uint32(len(out)))
}

//go:wasmexport ruled_decide
func decide(ptr, n uint32) uint64 {
	var req abi.DecideRequest
	if err := req.Decode(in[:n]); err != nil {
		return 0
	}
	switch req.Request.Subject {
	case "badpacked":
		return abi.Pack(0xFFFFFFF0, 64)
	case "garbage":
		out = append(out[:0], 0x0a, 0xff, 0xff)
		return abi.Pack(addr(out), uint32(len(out)))
	case "zero":
		return 0
	}
	out = (&abi.DecideResponse{Decision: sdk.Decision{Allowed: true, Granted: req.Request.Hits}}).Append(out[:0])
	return abi.Pack(addr(out), uint32(len(out)))
}
