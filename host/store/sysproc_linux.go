package store

import "syscall"

// sysProcAttr puts redis-server in its own process group, so that a Ctrl-C
// meant for ruled does not stop it behind the supervisor's back, and has the
// kernel kill it if ruled dies without stopping it. (Pdeathsig fires when
// the OS thread that started the child exits; Go only ends threads of
// goroutines that exit while locked with runtime.LockOSThread, which the
// store never does.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
