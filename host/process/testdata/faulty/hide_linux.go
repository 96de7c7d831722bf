package main

import "syscall"

// hideStepsSocket puts a socket of its own where ruled's steps socket was
// (file descriptor 3), so that the plugin's hello never reaches ruled, as
// with a plugin that declares steps but does not serve them.
func hideStepsSocket() {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		panic(err)
	}
	if _, err := syscall.Dup(3); err != nil { // kept open, and never served
		panic(err)
	}
	if err := syscall.Dup3(fds[0], 3, 0); err != nil {
		panic(err)
	}
}
