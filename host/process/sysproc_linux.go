package process

import "syscall"

// sysProcAttr asks the kernel to kill the plugin when ruled dies, however
// it dies (SIGKILL included). The signal is tied to the thread that started
// the process; Go keeps its threads for the life of the process unless a
// goroutine exits while locked to one, which ruled's code does not do. A
// plugin killed that way anyway is restarted like any crashed plugin, and
// sdk/process also exits on its own when its parent is gone.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
