package wasm

import (
	"fmt"
	"syscall"
)

// canReserve reports whether reserve works here.
const canReserve = true

// reserve maps n bytes of private, zeroed address space without reserving
// swap for it: pages cost memory only once touched.
func reserve(n uint64) ([]byte, func([]byte), error) {
	if n == 0 || n > 1<<32 {
		return nil, nil, fmt.Errorf("wasm: reserving %d bytes of linear memory", n)
	}
	buf, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, nil, fmt.Errorf("wasm: reserving %d bytes of linear memory: %w", n, err)
	}
	return buf, func(b []byte) { _ = syscall.Munmap(b) }, nil
}
