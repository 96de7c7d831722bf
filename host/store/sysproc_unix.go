//go:build unix && !linux

package store

import "syscall"

// sysProcAttr puts redis-server in its own process group, so that a Ctrl-C
// meant for ruled does not stop it behind the supervisor's back. Only Linux
// can tie its life to ruled's (Pdeathsig).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
