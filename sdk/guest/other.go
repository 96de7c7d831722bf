//go:build !wasip1

package guest

// platformImports: outside a Wasm module there is no host to import from.
func platformImports() imports { return nil }
