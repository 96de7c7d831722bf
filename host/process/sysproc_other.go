//go:build !linux

package process

import "syscall"

// sysProcAttr returns nil: only Linux can have the kernel kill the plugin
// when ruled dies. Plugins built with sdk/process exit on their own when
// their parent is gone (they poll for it).
func sysProcAttr() *syscall.SysProcAttr { return nil }
