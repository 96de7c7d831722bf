// Package abi is ruled's plugin ABI v1: the names, status codes and
// messages that cross the boundary between ruled and a plugin that does not
// link into it (a Wasm module, later a separate process).
//
// The messages are protocol buffers (ruled.proto in this directory). This
// package encodes and decodes them by hand with protowire, without
// reflection or generated code, so that a Wasm guest stays small; the host
// and sdk/guest share this one implementation. Encoders append to a caller's
// buffer and decoders fill a caller's struct, so that hot paths can reuse
// memory. docs/abi.md describes the ABI for authors in other languages.
package abi

import (
	"errors"
	"fmt"
)

// Version is the ABI version this package implements.
const Version = 1

// Exports every guest module provides.
const (
	// ExportMarker marks a module as a ruled ABI v1 plugin: () -> ().
	ExportMarker = "ruled_abi_v1"
	// ExportBuf returns a guest-owned buffer of at least size bytes:
	// (size i32) -> (ptr i32). The buffer stays valid, and the host may write
	// a message into it before each call, until the next ExportBuf call.
	ExportBuf = "ruled_buf"
	// ExportInit takes an InitRequest and answers Info: (ptr, len i32) -> (packed i64).
	ExportInit = "ruled_init"
	// ExportConfigure takes a ConfigureRequest and answers a
	// ConfigureResponse: (ptr, len i32) -> (packed i64).
	ExportConfigure = "ruled_configure"
	// ExportDecide takes a DecideRequest and answers a DecideResponse:
	// (ptr, len i32) -> (packed i64).
	ExportDecide = "ruled_decide"
	// ExportStep takes a StepRequest and answers a StepResponse:
	// (ptr, len i32) -> (packed i64). Optional (an ABI v1 addition): a
	// module that declares Info.steps provides it, and the host then
	// decides through it instead of ExportDecide, running each script
	// call itself between steps.
	ExportStep = "ruled_step"
)

// Imports the host provides to guests, all in module ImportModule.
const (
	// ImportModule is the module name of ruled's host functions.
	ImportModule = "ruled_v1"
	// ImportRedisEval runs a script: (req, len, out, cap i32) -> (i64).
	// It takes an EvalRequest and writes a Reply to out. It returns the
	// reply's length, a Status, or minus the reply's length when the reply
	// is larger than cap (then call ImportTakeReply with a larger buffer).
	ImportRedisEval = "redis_eval"
	// ImportTakeReply copies the reply that did not fit: (out, cap i32) -> (i64),
	// with the same results as ImportRedisEval.
	ImportTakeReply = "take_reply"
	// ImportLog writes a line to ruled's log: (level, ptr, len i32) -> ().
	// Levels are sdk.Level values.
	ImportLog = "log"
)

// Status is a negative result of ImportRedisEval or ImportTakeReply that
// reports a misuse of the ABI rather than a reply. Statuses lie in
// [-255, -1]; since a reply buffer is at least MinReplyCap bytes, minus a
// reply length that did not fit is always below -255.
type Status int64

// Statuses.
const (
	// StatusBadPointer: a pointer and length do not lie inside guest memory.
	StatusBadPointer Status = -1
	// StatusBadMessage: the request could not be decoded, or used a value
	// type that is not allowed there.
	StatusBadMessage Status = -2
	// StatusNoDecision: redis_eval was called outside ruled_decide (during
	// ruled_step, say).
	StatusNoDecision Status = -3
	// StatusNoReply: take_reply was called with no reply waiting.
	StatusNoReply Status = -4
	// StatusSmallBuffer: the reply buffer is smaller than MinReplyCap.
	StatusSmallBuffer Status = -5
)

// MinReplyCap is the smallest reply buffer a guest may pass.
const MinReplyCap = 256

// IsStatus reports whether r, a result of ImportRedisEval or
// ImportTakeReply, is a Status.
func IsStatus(r int64) bool { return r < 0 && r >= -255 }

// String names the status.
func (s Status) String() string {
	switch s {
	case StatusBadPointer:
		return "bad pointer"
	case StatusBadMessage:
		return "bad message"
	case StatusNoDecision:
		return "no decision in progress"
	case StatusNoReply:
		return "no reply waiting"
	case StatusSmallBuffer:
		return "reply buffer smaller than 256 bytes"
	}
	return fmt.Sprintf("status %d", int64(s))
}

// Pack packs a pointer and a length into an export's result: ptr<<32 | n.
// 0 means failure.
func Pack(ptr, n uint32) uint64 { return uint64(ptr)<<32 | uint64(n) }

// Unpack splits an export's result into a pointer and a length.
func Unpack(packed uint64) (ptr, n uint32) { return uint32(packed >> 32), uint32(packed) }

// Error is a host call that failed, as a Reply carries it to the guest.
type Error struct {
	// Class is the capability's failure class ("timeout", "connection",
	// "script", "refused", "isolation", "busy", "oom", "quarantine"), or empty.
	Class string
	// Message describes the failure.
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// ConfigError turns the problems a plugin's Configure reported across the
// boundary (ConfigureResponse.errors) back into one error, one line each, as
// a native plugin's Configure returns them; nil when there are none.
func ConfigError(problems []string) error {
	if len(problems) == 0 {
		return nil
	}
	errs := make([]error, len(problems))
	for i, m := range problems {
		errs[i] = errors.New(m)
	}
	return errors.Join(errs...)
}
