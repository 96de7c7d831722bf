// Command noabi is a reactor module that speaks a future ruled ABI only.
package main

//go:wasmexport ruled_abi_v2
func abiV2() {}

func main() {}
