package wasm

import (
	"sync/atomic"

	"github.com/tetratelabs/wazero/experimental"
)

// linearMemory is an instance's linear memory reserved outside the Go heap
// (where the platform allows, see reserve): the address space for the
// memory's maximum is mapped once and the kernel commits pages as the guest
// first touches them. Growing it copies nothing, and Go's collector neither
// scans it nor lets the heap grow twice its size, so an instance costs
// about the memory its guest uses.
//
// wazero frees the memory when the module closes, which may happen while a
// call still runs (the runtime's Close after a deadline); the mapping is
// then released when the call ends, never under running guest code.
type linearMemory struct {
	buf     []byte // len: the memory's size; cap: its maximum
	release func([]byte)
	// refs counts the memory's holders: wazero until it frees it, and the
	// call, if any, whose guest code may be running. The last to let go
	// releases the mapping.
	refs atomic.Int32
}

// Reallocate implements experimental.LinearMemory: the memory grows in
// place, up to its maximum.
func (m *linearMemory) Reallocate(size uint64) []byte {
	if size > uint64(cap(m.buf)) {
		return nil
	}
	m.buf = m.buf[:size]
	return m.buf
}

// Free implements experimental.LinearMemory.
func (m *linearMemory) Free() { m.drop() }

// enter marks guest code as running.
func (m *linearMemory) enter() {
	if m != nil {
		m.refs.Add(1)
	}
}

// exit marks guest code as stopped, releasing the memory if wazero freed
// it meanwhile.
func (m *linearMemory) exit() {
	if m != nil {
		m.drop()
	}
}

func (m *linearMemory) drop() {
	if m.refs.Add(-1) == 0 && m.release != nil {
		m.release(m.buf[:cap(m.buf)])
		m.release, m.buf = nil, nil
	}
}

// memoryAllocator returns the allocator an instance's memory comes from,
// and stores the memory in *out; nil when the platform has no way to
// reserve memory outside the Go heap (wazero then allocates it).
func memoryAllocator(out **linearMemory) experimental.MemoryAllocator {
	if !canReserve {
		return nil
	}
	return experimental.MemoryAllocatorFunc(func(_, max uint64) experimental.LinearMemory {
		buf, release, err := reserve(max)
		if err != nil {
			// Out of address space: the Go heap, as without an allocator
			// (a large allocation is mapped fresh, so untouched pages
			// cost nothing either).
			buf, release = make([]byte, 0, max), nil
		}
		m := &linearMemory{buf: buf[:0], release: release}
		m.refs.Store(2) // wazero's, and instantiation's: it runs guest code
		*out = m
		return m
	})
}
