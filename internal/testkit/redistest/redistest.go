// Package redistest starts real redis-server processes on free loopback
// ports for tests, alone (Start), joined into a Redis Cluster
// (StartCluster) or as a master, replicas and a Sentinel (StartSentinel),
// and stops them when the test ends.
package redistest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis writes a line to stderr for each failed dial of a pool. Tests
// that start, kill, pause and fence servers dial refusing ports on purpose
// (the readiness check before a server listens, a client of a node that is
// down), and a failing package prints every such line, burying the failure.
// Test binaries that use this package drop them: tests assert on the errors
// that calls return, and a daemon under test logs through its own logger.
func init() { redis.SetLogger(silentLogger{}) }

// silentLogger is go-redis's logger in tests: it drops every line.
type silentLogger struct{}

// Printf implements go-redis's logging interface.
func (silentLogger) Printf(context.Context, string, ...any) {}

// Server is one redis-server process listening on 127.0.0.1.
type Server struct {
	tb       testing.TB
	Port     int
	dir      string
	args     []string // extra arguments, reused by Restart
	password string   // the --requirepass argument, if any

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Start starts a redis-server on a free loopback port and registers its
// shutdown with tb.Cleanup. The test fails when redis-server is not on PATH.
//
// extraArgs are passed to redis-server after ruled's defaults, so they win;
// a first one that is not an option names a configuration file, which
// redis-server takes first.
// With "--requirepass", "pw" among them, readiness checks, Client and URL
// use that password.
func Start(tb testing.TB, extraArgs ...string) *Server {
	tb.Helper()
	return startOn(tb, tb.TempDir(), func(int) ([]string, error) { return extraArgs, nil })
}

// startOn starts a redis-server in dir on a free port, with the extra
// arguments argsFor returns for that port, trying other ports when the
// server cannot start (another process may have taken the port).
func startOn(tb testing.TB, dir string, argsFor func(port int) ([]string, error)) *Server {
	tb.Helper()
	bin := lookPath(tb, "redis-server")
	s := &Server{tb: tb, dir: dir}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		args, err := argsFor(port)
		if err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		s.Port, s.args, s.password = port, args, passwordIn(args)
		if lastErr = s.start(bin); lastErr == nil {
			tb.Cleanup(s.Kill)
			return s
		}
	}
	tb.Fatalf("redistest: starting redis-server: %v", lastErr)
	return nil
}

func lookPath(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("redistest: %s not found on PATH (install it: apt-get install redis-server): %v", name, err)
	}
	return bin
}

// passwordIn returns the value of the last "--requirepass" in args.
func passwordIn(args []string) string {
	pw := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--requirepass" {
			pw = args[i+1]
		}
	}
	return pw
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the server's redis:// URL, with the password if it has one.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.password != "" {
		u.User = url.UserPassword("", s.password)
	}
	return u.String()
}

// Client returns a new go-redis client for the server (with its password,
// if it has one), closed at cleanup.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Password: s.password})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// alive reports whether the process is running (not killed by Kill).
func (s *Server) alive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

func (s *Server) start(bin string) error {
	args := []string{
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
		"--protected-mode", "yes",
	}
	extra := s.args
	if len(extra) > 0 && !strings.HasPrefix(extra[0], "--") {
		// A configuration file (a Sentinel needs one) must come first.
		args, extra = append([]string{extra[0]}, args...), extra[1:]
	}
	args = append(args, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(fmt.Sprintf("%s/redis-%d.log", s.dir, s.Port))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("redis-server on port %d exited: %s", s.Port, strings.TrimSpace(string(log)))
		default:
		}
		if ping(s.Addr(), s.password) == nil {
			s.mu.Lock()
			s.cmd, s.exited = cmd, exited
			s.mu.Unlock()
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("redis-server on port %d did not answer PING within 10s", s.Port)
}

// Kill stops the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a paused server cannot die otherwise
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		s.tb.Errorf("redistest: redis-server on port %d still running 5s after SIGKILL", s.Port)
	}
}

// Restart kills the server and starts a fresh one on the same port with
// the same arguments: its data and script cache are gone, as after a crash.
// A Cluster node keeps its node configuration file and rejoins.
func (s *Server) Restart() {
	s.tb.Helper()
	s.Kill()
	bin := lookPath(s.tb, "redis-server")
	var err error
	for i := 0; i < 50; i++ { // the port may take a moment to free
		if err = s.start(bin); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.tb.Fatalf("redistest: restart: %v", err)
}

// Pause stops the process with SIGSTOP: connections stay open, nothing answers.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping returns nil when the server at addr answers PING, authenticating
// with password when it is not empty.
func ping(addr, password string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}
