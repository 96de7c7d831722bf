package wasm

import "testing"

// Memory wazero frees while guest code may run is released only when the
// call ends; memory freed between calls is released at once.
func TestLinearMemoryIsReleasedOnlyOutsideCalls(t *testing.T) {
	var m *linearMemory
	alloc := memoryAllocator(&m)
	if alloc == nil {
		t.Skip("no reserved linear memory on this platform") // the Go heap then
	}
	alloc.Allocate(0, 1<<20)
	if m == nil || m.refs.Load() < 2 {
		t.Fatal("a new memory is not busy: instantiation runs guest code")
	}
	m.exit()
	released := 0
	unmap := m.release
	m.release = func(b []byte) { released++; unmap(b) }

	buf := m.Reallocate(64 << 10)
	if len(buf) != 64<<10 || m.Reallocate(2<<20) != nil {
		t.Fatal("Reallocate does not grow in place up to the maximum only")
	}
	m.enter()
	m.Free()
	buf[100] = 1 // still mapped: a call is running
	if released != 0 {
		t.Fatal("released under a running call")
	}
	m.exit()
	if released != 1 || m.buf != nil {
		t.Fatalf("released %d times after the call ended", released)
	}

	var n *linearMemory
	memoryAllocator(&n).Allocate(0, 1<<20)
	n.exit()
	n.Free()
	if n.buf != nil {
		t.Fatal("memory freed between calls is still mapped")
	}
	n.enter() // a nil-safe no-op on a released memory
	n.exit()
}
