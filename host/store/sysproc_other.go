//go:build !unix

package store

import "syscall"

// sysProcAttr has nothing to set outside Unix.
func sysProcAttr() *syscall.SysProcAttr { return nil }
