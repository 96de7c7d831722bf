package store

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrRedisServerNotFound is wrapped by Open's error when managed mode cannot
// find a redis-server binary.
var ErrRedisServerNotFound = errors.New("redis-server not found")

const installHint = "install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or pass --redis redis://host:port"

// Supervision constants.
const (
	minRestartBackoff = 100 * time.Millisecond
	maxRestartBackoff = 5 * time.Second
	// stableAfter: a server that ran this long before dying restarts after
	// minRestartBackoff again.
	stableAfter = 30 * time.Second
	// stopGrace is how long Close waits after SIGTERM before SIGKILL.
	stopGrace = 5 * time.Second
	// maxLogLine bounds one logged line of redis-server output.
	maxLogLine = 1024
	// maxSocketPath keeps the socket path within sun_path on Linux (108)
	// and macOS (104), terminator included.
	maxSocketPath = 103
)

// nextBackoff doubles d up to maxRestartBackoff.
func nextBackoff(d time.Duration) time.Duration {
	return min(2*d, maxRestartBackoff)
}

// managed is a supervised redis-server on a private unix socket.
type managed struct {
	bin          string
	dir          string
	tempDir      bool // dir was created by Open and is removed by Close
	sock         string
	startTimeout time.Duration
	log          *slog.Logger

	ctx    context.Context // cancelled by stopSupervision
	cancel context.CancelFunc
	done   chan struct{} // closed when the supervisor has returned

	mu       sync.Mutex
	cur      *proc
	version  string
	restarts int
}

// proc is one redis-server process.
type proc struct {
	cmd     *exec.Cmd
	pid     int
	started time.Time
	out     *lineLogger
	exited  chan struct{} // closed after Wait returned and the output is logged
	waitErr error         // valid once exited is closed
}

// findRedisServer resolves the binary for managed mode.
func findRedisServer(name string) (string, error) {
	if name == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return "", fmt.Errorf("store: %w on PATH: %s", ErrRedisServerNotFound, installHint)
		}
		return bin, nil
	}
	bin, err := exec.LookPath(name)
	if err != nil {
		if _, serr := os.Stat(name); serr == nil {
			return "", fmt.Errorf("store: redis-server %q cannot be run: %w", name, err)
		}
		return "", fmt.Errorf("store: %w at %q: %s", ErrRedisServerNotFound, name, installHint)
	}
	return bin, nil
}

func openManaged(ctx context.Context, o Options, log *slog.Logger) (_ *Store, err error) {
	bin, err := findRedisServer(o.RedisServer)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("store: starting redis-server: %w", err)
	}
	m := &managed{bin: bin, startTimeout: o.StartTimeout, log: log, done: make(chan struct{})}
	if m.startTimeout <= 0 {
		m.startTimeout = DefaultStartTimeout
	}
	if o.DataDir == "" {
		if m.dir, err = os.MkdirTemp("", "ruled-redis-"); err != nil {
			return nil, fmt.Errorf("store: creating a directory for redis-server: %w", err)
		}
		m.tempDir = true
	} else {
		if m.dir, err = filepath.Abs(o.DataDir); err != nil {
			return nil, fmt.Errorf("store: data dir %q: %w", o.DataDir, err)
		}
		if err := os.MkdirAll(m.dir, 0o700); err != nil {
			return nil, fmt.Errorf("store: creating data dir: %w", err)
		}
	}
	defer func() {
		if err != nil && m.tempDir {
			_ = os.RemoveAll(m.dir)
		}
	}()
	m.sock = filepath.Join(m.dir, "redis.sock")
	if len(m.sock) > maxSocketPath {
		return nil, fmt.Errorf("store: socket path %q is %d bytes, more than a unix socket allows (%d): choose a shorter --data-dir",
			m.sock, len(m.sock), maxSocketPath)
	}

	p, err := m.start(ctx)
	if err != nil {
		return nil, err
	}
	m.cur = p

	ep := &endpoint{kind: KindStandalone, simple: &redis.Options{Network: "unix", Addr: m.sock}}
	s := &Store{kind: KindManaged, m: m, ep: ep}
	if s.client, s.dialTO, err = newClient(ep, o); err != nil {
		p.stop()
		return nil, err
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	go m.supervise(p)
	log.Info("managed redis-server started", "redis", m.describe(), "pid", p.pid)
	return s, nil
}

func (m *managed) args() []string {
	return []string{
		"--port", "0",
		"--unixsocket", m.sock,
		"--unixsocketperm", "700",
		"--save", "",
		"--appendonly", "no",
		"--dir", m.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "notice",
		// No ASCII-art logo: it is not in the log format (every line
		// would be relayed as a warning) and says nothing.
		"--always-show-logo", "no",
		// A script still running after this answers BUSY to everyone
		// else, which ruled's watchdog sees and stops (docs/operations.md,
		// "Script watchdog"). Redis 7 calls it busy-reply-threshold and
		// keeps this name, which Redis 6 also knows.
		"--lua-time-limit", strconv.Itoa(int(ManagedBusyThreshold / time.Millisecond)),
	}
}

// ManagedBusyThreshold is the managed Redis's busy-reply-threshold: ruled's
// own scripts take microseconds, so a script running this long is stuck.
const ManagedBusyThreshold = 100 * time.Millisecond

func (m *managed) describe() string {
	m.mu.Lock()
	v := m.version
	m.mu.Unlock()
	if v == "" {
		v = "(version unknown)"
	}
	return fmt.Sprintf("managed redis-server %s at unix://%s", v, m.sock)
}

func (m *managed) pid() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		return 0
	}
	return m.cur.pid
}

func (m *managed) restartCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restarts
}

// start runs one redis-server and waits until it answers on the socket. On
// any failure, ctx's end included, the process is gone when start returns.
func (m *managed) start(ctx context.Context) (*proc, error) {
	if c, err := dialSocket(ctx, m.sock); err == nil {
		_ = c.Close()
		return nil, fmt.Errorf("store: something already answers on %s: is another ruled using the same --data-dir?", m.sock)
	}
	// The logger already names the component (store); the program whose
	// output it relays is the line's source.
	out := newLineLogger(m.log.With("source", "redis-server"))
	cmd := exec.Command(m.bin, m.args()...)
	cmd.Dir = m.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	cmd.WaitDelay = time.Second // a stray child holding the pipe cannot block Wait
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("store: starting %s: %w", m.bin, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, started: time.Now(), out: out, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		out.flush()
		p.waitErr = err
		close(p.exited)
	}()
	if err := m.waitReady(ctx, p); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

// waitReady polls the socket until the new server answers PING and INFO
// with its own process id, the process exits, ctx ends or the start-up
// time-out passes.
func (m *managed) waitReady(ctx context.Context, p *proc) error {
	deadline := time.NewTimer(m.startTimeout)
	defer deadline.Stop()
	delay := 5 * time.Millisecond
	var lastErr error
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("store: waiting for redis-server to start: %w", err)
		}
		info, err := probe(ctx, m.sock)
		if err == nil {
			if got := info["process_id"]; got != strconv.Itoa(p.pid) {
				return fmt.Errorf("store: %s is served by another redis-server (pid %s, not %d): is another ruled using the same --data-dir?", m.sock, got, p.pid)
			}
			m.mu.Lock()
			m.version = info["redis_version"]
			m.mu.Unlock()
			return nil
		}
		lastErr = err
		t := time.NewTimer(delay)
		select {
		case <-p.exited:
			t.Stop()
			msg := p.out.tail()
			if msg == "" {
				msg = "(no output)"
			}
			return fmt.Errorf("store: redis-server exited during start-up (%v): %s", p.waitErr, msg)
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("store: waiting for redis-server to start: %w", ctx.Err())
		case <-deadline.C:
			t.Stop()
			return fmt.Errorf("store: redis-server did not answer PING on %s within %v: %w", m.sock, m.startTimeout, lastErr)
		case <-t.C:
		}
		delay = min(2*delay, 100*time.Millisecond)
	}
}

// supervise restarts the server whenever it exits, until stopSupervision.
func (m *managed) supervise(p *proc) {
	defer close(m.done)
	backoff := minRestartBackoff
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-p.exited:
		}
		ran := time.Since(p.started)
		if ran >= stableAfter {
			backoff = minRestartBackoff
		}
		m.log.Warn("managed redis-server exited unexpectedly; restarting",
			"pid", p.pid, "status", exitStatus(p.waitErr), "ran", ran.Round(time.Millisecond), "restart_in", backoff)
		for {
			t := time.NewTimer(backoff)
			select {
			case <-m.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			np, err := m.start(m.ctx)
			backoff = nextBackoff(backoff)
			if err != nil {
				if m.ctx.Err() != nil {
					return
				}
				m.log.Error("restarting managed redis-server failed", "err", err, "retry_in", backoff)
				continue
			}
			m.mu.Lock()
			m.cur = np
			m.restarts++
			n := m.restarts
			m.mu.Unlock()
			m.log.Warn("managed redis-server restarted; its data is gone", "pid", np.pid, "restarts", n, "socket", m.sock)
			p = np
			break
		}
	}
}

func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// stopSupervision stops the supervisor and waits for it to return. A start
// in progress is aborted and its process killed.
func (m *managed) stopSupervision() {
	m.cancel()
	<-m.done
}

// shutdown stops the current server and removes what Open created. The
// supervisor must have been stopped.
func (m *managed) shutdown() error {
	m.mu.Lock()
	p := m.cur
	m.cur = nil
	m.mu.Unlock()
	if p != nil {
		p.stop()
		m.log.Info("managed redis-server stopped", "pid", p.pid)
	}
	if m.tempDir {
		if err := os.RemoveAll(m.dir); err != nil {
			return fmt.Errorf("store: removing %s: %w", m.dir, err)
		}
		return nil
	}
	if err := os.Remove(m.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: removing %s: %w", m.sock, err)
	}
	return nil
}

// stop sends SIGTERM, then SIGKILL after stopGrace, and waits for the exit.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		p.kill()
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

func dialSocket(ctx context.Context, sock string) (net.Conn, error) {
	d := net.Dialer{Timeout: 100 * time.Millisecond}
	return d.DialContext(ctx, "unix", sock)
}

// probe sends PING and INFO server over a fresh connection and returns the
// INFO fields. It speaks RESP directly so that start-up polling does not go
// through (and trip the dial-error breaker of) a go-redis pool.
func probe(ctx context.Context, sock string) (map[string]string, error) {
	c, err := dialSocket(ctx, sock)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	deadline := time.Now().Add(time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetDeadline(deadline)
	if _, err := io.WriteString(c, "*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n"); err != nil {
		return nil, err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return nil, fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "$") {
		return nil, fmt.Errorf("INFO answered %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n < 0 || n > 1<<20 {
		return nil, fmt.Errorf("INFO answered %q", line)
	}
	body := make([]byte, n+2)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	info := make(map[string]string)
	for _, l := range strings.Split(string(body[:n]), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			info[k] = v
		}
	}
	return info, nil
}
