package wasm

// Uninterruptible returns opts with no way to stop a guest: a looping guest
// would never return. Only for the benchmark that measures what
// interruptibility costs.
func Uninterruptible(o Options) Options {
	o.interrupt = interruptNone
	return o
}

// WazeroInterruptible returns opts that stop a guest with wazero's
// WithCloseOnContextDone instead of instrumenting the module. Only for the
// benchmark that compares the two.
func WazeroInterruptible(o Options) Options {
	o.interrupt = interruptWazero
	return o
}
