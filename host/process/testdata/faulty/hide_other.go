//go:build !linux

package main

// hideStepsSocket is Linux's only (the test that uses it runs there).
func hideStepsSocket() { panic("hideStepsSocket needs Linux") }
