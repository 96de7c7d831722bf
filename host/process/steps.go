package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// stepConn carries a process's steps over its steps socket (sdk/abi/plugin.proto,
// "The steps socket"): each call is one frame written, and answers, which may
// come in any order, go to their callers by id. Its errors are gRPC statuses,
// as a gRPC call's would be, so that callFailed judges both alike.
//
// No goroutine of its own reads the socket: one waiting caller at a time,
// the leader, reads it, hands the answers it reads to their callers, and
// passes the lead to another waiting caller when its own answer has come.
// A lone call so reads its own answer, which saves the hand-off from a
// reader goroutine: at low load that hand-off woke an idle CPU and cost a
// third of the round trip.
type stepConn struct {
	conn net.Conn

	writeMu sync.Mutex // frames are written whole, one at a time
	out     []byte     // the frame being written, under writeMu

	r   *bufio.Reader // read by the leader only
	buf []byte        // the leader's buffer for frames larger than r's

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]*stepWaiter
	leader  bool  // a caller leads; it passes the lead on before it leaves
	err     error // why the socket ended; every later call fails with it
}

// stepWaiter is a call waiting for its answer. Its channel receives one
// event at most while it waits (its answer, or the lead) and is closed when
// the socket ends. Events are sent under stepConn.mu, to waiters in the map.
type stepWaiter struct {
	ch      chan stepEvent
	written bool // its step is on the socket: it may lead (under stepConn.mu)
}

type stepEvent struct {
	resp *abi.StepResponse
	lead bool // read the socket: the caller before left
}

// openStepConn reads the plugin's hello on conn, waiting until deadline.
// conn is closed on error.
func openStepConn(conn net.Conn, deadline time.Time) (*stepConn, error) {
	r := bufio.NewReaderSize(conn, 64<<10)
	_ = conn.SetReadDeadline(deadline)
	var hello abi.StepAnswer
	_, err := pluginrpc.ReadFrame(r, nil, &hello)
	if err == nil && hello.ID != 0 {
		err = fmt.Errorf("the first frame answers step %d", hello.ID)
	}
	if err != nil {
		_ = conn.Close()
		if isTimeout(err) {
			return nil, errors.New("the plugin declared steps but did not say hello on the steps socket (built with an older sdk/process?)")
		}
		return nil, fmt.Errorf("the steps socket's hello: %w", err)
	}
	return &stepConn{conn: conn, r: r, waiting: map[uint64]*stepWaiter{}}, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// end records why the socket ended, fails the calls waiting and closes it.
func (s *stepConn) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	for id, w := range s.waiting {
		close(w.ch)
		delete(s.waiting, id)
	}
	s.mu.Unlock()
	_ = s.conn.Close()
}

// close ends the socket; calls in flight fail as Unavailable.
func (s *stepConn) close() { s.end(status.Error(codes.Unavailable, "steps socket closed")) }

// call sends one step and waits, until ctx is done, for its answer, leading
// when no other caller does or when the lead is passed to it. A frame that
// cannot be written whole by ctx's deadline ends the socket: the process
// is not reading.
func (s *stepConn) call(ctx context.Context, req *abi.StepRequest) (*abi.StepResponse, error) {
	w := &stepWaiter{ch: make(chan stepEvent, 1)}
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.nextID++
	id := s.nextID
	s.waiting[id] = w
	s.mu.Unlock()

	if err := s.write(ctx, id, req); err != nil {
		s.leave(id, w, false)
		return nil, err
	}
	// Only a caller whose step is written leads: one still writing could
	// wait on a full socket while nobody reads the answers that would
	// empty it.
	s.mu.Lock()
	leading := false
	if s.waiting[id] == w { // not answered (or ended) already
		w.written = true
		leading = !s.leader
		s.leader = true
	}
	s.mu.Unlock()
	if !leading {
		select {
		case ev, ok := <-w.ch:
			switch {
			case !ok:
				return nil, s.ended()
			case !ev.lead:
				return ev.resp, nil
			}
		case <-ctx.Done():
			s.leave(id, w, false)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return s.lead(ctx, id, w)
}

// lead reads the socket until the answer to id comes, handing the others'
// to them, then passes the lead on. Its read ends at ctx's deadline, not
// at a cancellation: a cancelled leader waits for its own answer, which
// is on its way, rather than cut the read under the next leader. A read
// cut by the deadline is taken up by the next leader: frames are consumed
// whole (pluginrpc.ReadFrame).
func (s *stepConn) lead(ctx context.Context, id uint64, w *stepWaiter) (*abi.StepResponse, error) {
	deadline, _ := ctx.Deadline()
	_ = s.conn.SetReadDeadline(deadline)
	for {
		a := new(abi.StepAnswer) // handed to its caller: one per frame
		var err error
		s.buf, err = pluginrpc.ReadFrame(s.r, s.buf, a)
		switch {
		case err == nil:
		case isTimeout(err) && !errors.Is(err, pluginrpc.ErrFrameCut):
			s.leave(id, w, true)
			return nil, status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
		default:
			s.end(status.Errorf(codes.Unavailable, "steps socket: %v", err))
			return nil, s.ended()
		}
		s.mu.Lock()
		other := s.waiting[a.ID]
		delete(s.waiting, a.ID)
		if a.ID == id {
			s.passLead()
			s.mu.Unlock()
			return &a.Step, nil
		}
		if other != nil { // nil: its caller gave up
			other.ch <- stepEvent{resp: &a.Step}
		}
		s.mu.Unlock()
	}
}

// leave forgets a call that gives up, passing the lead on if it led or was
// just given it.
func (s *stepConn) leave(id uint64, w *stepWaiter, leading bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting[id] == w {
		delete(s.waiting, id)
	}
	select {
	case ev, ok := <-w.ch: // sent before the delete
		leading = leading || (ok && ev.lead)
	default:
	}
	if leading && s.err == nil {
		s.passLead()
	}
}

// passLead gives the lead to a waiting call whose step is written, or
// gives it up when there is none. Its caller holds mu and leads.
func (s *stepConn) passLead() {
	for _, w := range s.waiting {
		if w.written {
			w.ch <- stepEvent{lead: true} // empty: a waiter in the map has had no event
			return
		}
	}
	s.leader = false
}

// write writes the frame of step id, bounded by ctx's deadline. A frame
// cut short by it ends the socket; one not begun fails only its call.
func (s *stepConn) write(ctx context.Context, id uint64, req *abi.StepRequest) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var err error
	if s.out, err = pluginrpc.AppendFrame(s.out[:0], &abi.StepCall{ID: id, Step: *req}); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	deadline, _ := ctx.Deadline() // none: zero, no deadline
	_ = s.conn.SetWriteDeadline(deadline)
	if n, err := s.conn.Write(s.out); err != nil {
		if n == 0 && isTimeout(err) { // nothing written: the socket is as it was
			return status.Error(codes.DeadlineExceeded, "no time left to send the step")
		}
		if isTimeout(err) {
			err = errors.New("the process stopped reading its steps")
		}
		// A frame written in part leaves the socket unusable: the process
		// is restarted (callFailed takes Unavailable as the process gone).
		s.end(status.Errorf(codes.Unavailable, "steps socket: %v", err))
		return s.ended()
	}
	if cap(s.out) > 64<<10 {
		s.out = nil // keep no rare large frame's buffer
	}
	return nil
}

// ended returns why the socket ended.
func (s *stepConn) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return status.Error(codes.Unavailable, "steps socket closed")
}
