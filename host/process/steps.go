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

	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// stepConn carries a process's steps over its steps socket (sdk/abi/plugin.proto,
// "The steps socket"): each call is one frame written, and answers, which may
// come in any order, go to their callers by id. Its errors are gRPC statuses,
// as a gRPC call's would be, so that callFailed judges both alike.
type stepConn struct {
	conn net.Conn

	writeMu sync.Mutex // frames are written whole, one at a time
	out     []byte     // the frame being written, under writeMu

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *abipb.StepResponse
	err     error // why the socket ended; every later call fails with it
}

// openStepConn reads the plugin's hello on conn, waiting until deadline,
// and then serves calls until conn is closed. conn is closed on error.
func openStepConn(conn net.Conn, deadline time.Time) (*stepConn, error) {
	r := bufio.NewReaderSize(conn, 64<<10)
	_ = conn.SetReadDeadline(deadline)
	var hello pluginpb.StepAnswer
	_, err := pluginrpc.ReadFrame(r, nil, &hello)
	if err == nil && hello.GetId() != 0 {
		err = fmt.Errorf("the first frame answers step %d", hello.GetId())
	}
	if err != nil {
		_ = conn.Close()
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, errors.New("the plugin declared steps but did not say hello on the steps socket (built with an older sdk/process?)")
		}
		return nil, fmt.Errorf("the steps socket's hello: %w", err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	s := &stepConn{conn: conn, waiting: map[uint64]chan *abipb.StepResponse{}}
	go s.receive(r)
	return s, nil
}

// receive hands each answer to its caller until the socket ends.
func (s *stepConn) receive(r *bufio.Reader) {
	var buf []byte
	for {
		var a pluginpb.StepAnswer
		var err error
		if buf, err = pluginrpc.ReadFrame(r, buf, &a); err != nil {
			s.end(status.Errorf(codes.Unavailable, "steps socket: %v", err))
			return
		}
		s.mu.Lock()
		ch := s.waiting[a.GetId()]
		delete(s.waiting, a.GetId())
		s.mu.Unlock()
		if ch != nil { // nil: its caller gave up
			ch <- a.GetStep()
		}
	}
}

// end records why the socket ended, fails the calls waiting and closes it.
func (s *stepConn) end(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	for id, ch := range s.waiting {
		close(ch)
		delete(s.waiting, id)
	}
	s.mu.Unlock()
	_ = s.conn.Close()
}

// close ends the socket; calls in flight fail as Unavailable.
func (s *stepConn) close() { s.end(status.Error(codes.Unavailable, "steps socket closed")) }

// call sends one step and waits, until ctx is done, for its answer. A
// frame that cannot be written whole by ctx's deadline ends the socket:
// the process is not reading.
func (s *stepConn) call(ctx context.Context, req *abipb.StepRequest) (*abipb.StepResponse, error) {
	ch := make(chan *abipb.StepResponse, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return nil, err
	}
	s.nextID++
	id := s.nextID
	s.waiting[id] = ch
	s.mu.Unlock()

	if err := s.write(ctx, &pluginpb.StepCall{Id: id, Step: req}); err != nil {
		s.forget(id)
		return nil, err
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, s.ended()
		}
		return resp, nil
	case <-ctx.Done():
		s.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// write writes one frame, bounded by ctx's deadline.
func (s *stepConn) write(ctx context.Context, m *pluginpb.StepCall) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	var err error
	if s.out, err = pluginrpc.AppendFrame(s.out[:0], m); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if d, ok := ctx.Deadline(); ok {
		_ = s.conn.SetWriteDeadline(d)
	}
	if _, err := s.conn.Write(s.out); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
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

func (s *stepConn) forget(id uint64) {
	s.mu.Lock()
	delete(s.waiting, id)
	s.mu.Unlock()
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
