//go:build unix

package process

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// stepsChildFD is the steps socket's file descriptor in the plugin's
// process: the first of exec.Cmd's ExtraFiles (InitRequest.steps_fd).
const stepsChildFD = 3

// stepsSocket returns the two ends of a new steps socket: ruled's, and the
// process's, to be passed to it as its first extra file. Both are
// close-on-exec in ruled, so that no other child inherits them and the
// socket ends when the plugin's process does.
func stepsSocket() (net.Conn, *os.File, error) {
	syscall.ForkLock.RLock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fds[0])
		syscall.CloseOnExec(fds[1])
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, nil, fmt.Errorf("steps socket: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "ruled-steps")
	conn, err := net.FileConn(ours) // a duplicate, in non-blocking mode
	_ = ours.Close()
	if err != nil {
		_ = syscall.Close(fds[1])
		return nil, nil, fmt.Errorf("steps socket: %w", err)
	}
	return conn, os.NewFile(uintptr(fds[1]), "ruled-steps-plugin"), nil
}
