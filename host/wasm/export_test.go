package wasm

// Uninterruptible returns opts with the sandbox's interruptibility off: a
// looping guest would never stop. Only for the benchmark that measures what
// interruptibility costs.
func Uninterruptible(o Options) Options {
	o.uninterruptible = true
	return o
}
