package process

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
)

// stepStream carries a process's steps over its one Plugin.Steps stream:
// calls are sent in turn and answers, which may come in any order, go to
// their callers by id. No gRPC stream is set up per step.
type stepStream struct {
	stream grpc.BidiStreamingClient[pluginpb.StepCall, pluginpb.StepAnswer]
	sendMu sync.Mutex // Send is not safe for concurrent use

	mu      sync.Mutex
	nextID  uint64
	waiting map[uint64]chan *abipb.StepResponse
	err     error // why the stream ended; every later call fails with it
}

// openStepStream opens the stream, which lives until ctx is done or the
// process goes.
func openStepStream(ctx context.Context, rpc pluginpb.PluginClient) (*stepStream, error) {
	stream, err := rpc.Steps(ctx)
	if err != nil {
		return nil, err
	}
	s := &stepStream{stream: stream, waiting: map[uint64]chan *abipb.StepResponse{}}
	go s.receive()
	return s, nil
}

// receive hands each answer to its caller until the stream ends.
func (s *stepStream) receive() {
	for {
		a, err := s.stream.Recv()
		if err != nil {
			s.mu.Lock()
			s.err = err
			for id, ch := range s.waiting {
				close(ch)
				delete(s.waiting, id)
			}
			s.mu.Unlock()
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

// call sends one step and waits, until ctx is done, for its answer. Its
// errors are gRPC statuses, as a unary call's would be.
func (s *stepStream) call(ctx context.Context, req *abipb.StepRequest) (*abipb.StepResponse, error) {
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

	s.sendMu.Lock()
	err := s.stream.Send(&pluginpb.StepCall{Id: id, Step: req})
	s.sendMu.Unlock()
	if err != nil { // the stream ended; Recv has or will have the reason
		s.forget(id)
		return nil, s.ended(status.Errorf(codes.Unavailable, "step stream: %v", err))
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return nil, s.ended(status.Error(codes.Unavailable, "step stream closed"))
		}
		return resp, nil
	case <-ctx.Done():
		s.forget(id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

func (s *stepStream) forget(id uint64) {
	s.mu.Lock()
	delete(s.waiting, id)
	s.mu.Unlock()
}

// ended returns why the stream ended (as Recv saw it), or err.
func (s *stepStream) ended(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	return err
}
