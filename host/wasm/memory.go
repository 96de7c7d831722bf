package wasm

import (
	"sync"

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
	mu      sync.Mutex
	buf     []byte // len: the memory's size; cap: its maximum
	release func([]byte)
	busy    bool // guest code may be running
	freed   bool // wazero freed it while busy
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
func (m *linearMemory) Free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy {
		m.freed = true
		return
	}
	m.unmap()
}

func (m *linearMemory) unmap() {
	if m.release != nil {
		m.release(m.buf[:cap(m.buf)])
		m.release, m.buf = nil, nil
	}
}

// enter marks guest code as running.
func (m *linearMemory) enter() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.busy = true
	m.mu.Unlock()
}

// exit marks guest code as stopped, releasing the memory if it was freed
// meanwhile.
func (m *linearMemory) exit() {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.busy = false
	if m.freed {
		m.unmap()
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
		m := &linearMemory{buf: buf[:0], release: release, busy: true}
		*out = m
		return m
	})
}
