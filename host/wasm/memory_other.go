//go:build !linux

package wasm

// canReserve reports whether reserve works here: elsewhere wazero
// allocates linear memory on the Go heap.
const canReserve = false

func reserve(uint64) ([]byte, func([]byte), error) { return nil, nil, nil }
