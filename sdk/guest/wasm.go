//go:build wasip1

//lint:file-ignore U1000 the exports are called by the host (go:wasmexport)

package guest

import (
	"unsafe"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// The ABI v1 exports. Each one validates what the host passes, recovers from
// panics (module.export) and answers 0 on failure.

//go:wasmexport ruled_abi_v1
func ruledABIv1() {}

//go:wasmexport ruled_buf
func ruledBuf(size uint32) uint32 {
	m := registered
	if m == nil {
		noAlgorithm()
		return 0
	}
	return addr(m.buffer(int(size)))
}

//go:wasmexport ruled_init
func ruledInit(ptr, n uint32) uint64 { return call(abi.ExportInit, ptr, n, (*module).initialize) }

//go:wasmexport ruled_configure
func ruledConfigure(ptr, n uint32) uint64 {
	return call(abi.ExportConfigure, ptr, n, (*module).configure)
}

//go:wasmexport ruled_decide
func ruledDecide(ptr, n uint32) uint64 { return call(abi.ExportDecide, ptr, n, (*module).decide) }

//go:wasmexport ruled_step
func ruledStep(ptr, n uint32) uint64 { return call(abi.ExportStep, ptr, n, (*module).step) }

func call(name string, ptr, n uint32, handle func(*module, []byte) ([]byte, error)) uint64 {
	m := registered
	if m == nil {
		noAlgorithm()
		return 0
	}
	// The message must lie in the buffer ruled_buf handed out.
	if n > 0 && (ptr != addr(m.in) || int(n) > cap(m.in)) {
		m.logf(sdk.LevelError, "%s: message at %#x+%d is not in the buffer ruled_buf returned", name, ptr, n)
		return 0
	}
	out, ok := m.export(name, m.in[:n:n], handle)
	if !ok {
		return 0
	}
	return abi.Pack(addr(out), uint32(len(out)))
}

func noAlgorithm() {
	wasmImports{}.log(sdk.LevelError, "sdk/guest: no algorithm registered: call guest.Register from an init function")
}

// addr is the address of a slice's backing array in linear memory. The
// buffers handed to the host are reachable from registered, and Go's
// collector does not move objects, so the address stays valid.
func addr(b []byte) uint32 {
	if cap(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))))
}

//go:wasmimport ruled_v1 redis_eval
func hostRedisEval(req unsafe.Pointer, reqLen uint32, out unsafe.Pointer, outCap uint32) int64

//go:wasmimport ruled_v1 take_reply
func hostTakeReply(out unsafe.Pointer, outCap uint32) int64

//go:wasmimport ruled_v1 log
func hostLog(level int32, msg unsafe.Pointer, n uint32)

// wasmImports calls the host functions.
type wasmImports struct{}

func (wasmImports) redisEval(req, out []byte) int64 {
	return hostRedisEval(unsafe.Pointer(unsafe.SliceData(req)), uint32(len(req)),
		unsafe.Pointer(unsafe.SliceData(out)), uint32(len(out)))
}

func (wasmImports) takeReply(out []byte) int64 {
	return hostTakeReply(unsafe.Pointer(unsafe.SliceData(out)), uint32(len(out)))
}

func (wasmImports) log(level sdk.Level, msg string) {
	hostLog(int32(level), unsafe.Pointer(unsafe.StringData(msg)), uint32(len(msg)))
}

func platformImports() imports { return wasmImports{} }
