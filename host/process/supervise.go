package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// markDown takes in out of service, once: decisions fail at once from now
// on, and the supervisor kills it and starts another.
func (p *Plugin) markDown(in *instance, why error) {
	if !p.inst.CompareAndSwap(in, nil) {
		return
	}
	p.mu.Lock()
	p.downErr, p.dead = why, in
	p.mu.Unlock()
	if !p.closed.Load() {
		p.logs.logger().Warn("process plugin down; restarting it", "pid", in.pid, "err", why)
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// supervise health-checks the running process and restarts it with
// backoff when it goes down. When the plugin closes, it stops every process
// and returns.
func (p *Plugin) supervise() {
	defer close(p.done)
	defer p.stopAll()
	tick := time.NewTicker(p.opts.HealthInterval)
	defer tick.Stop()
	failures := 0 // restarts in a row that did not last
	for {
		select {
		case <-p.closing:
			return
		case <-p.wake:
		case <-tick.C:
			if in := p.inst.Load(); in != nil {
				if err := in.healthCheck(p.opts.CallTimeout); err != nil {
					p.markDown(in, err)
				}
			}
		}
		if p.inst.Load() != nil {
			continue
		}
		p.mu.Lock()
		dead := p.dead
		p.dead = nil
		p.mu.Unlock()
		if dead != nil {
			if time.Since(dead.started) >= p.opts.MaxRestartBackoff {
				failures = 0
			}
			dead.kill() // it crashed or hangs: no grace
			dead.stop(stopGrace)
		}
		for p.inst.Load() == nil {
			wait := backoff(p.opts.RestartBackoff, p.opts.MaxRestartBackoff, failures)
			failures++
			if !p.sleep(wait) {
				return
			}
			if err := p.restart(); err != nil {
				if errors.Is(err, ErrClosed) {
					return
				}
				p.mu.Lock()
				p.downErr = err
				p.mu.Unlock()
				p.logs.logger().Warn("process plugin restart failed", "attempt", failures, "err", err,
					"retry_in", backoff(p.opts.RestartBackoff, p.opts.MaxRestartBackoff, failures))
			}
		}
	}
}

// backoff returns the wait before restart attempt n (from 0): first,
// doubling up to most.
func backoff(first, most time.Duration, n int) time.Duration {
	d := first
	for range n {
		if d >= most/2 {
			return most
		}
		d *= 2
	}
	return min(d, most)
}

// sleep waits for d, and reports false when the plugin closes meanwhile.
func (p *Plugin) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.closing:
		return false
	}
}

// restart starts a new process, checks that it is the same plugin, sends
// it every live config and puts it in service.
func (p *Plugin) restart() error {
	in, err := p.start(context.Background())
	if err != nil {
		return err
	}
	if !sameInfo(&in.info, &p.info) || (in.stepper != nil) != p.steps {
		in.stop(stopGrace)
		return fmt.Errorf("the executable now says it is %s %s with other scripts, traits or steps than %s %s when it was loaded; reload the rules to load it anew",
			in.info.Name, in.info.Version, p.info.Name, p.info.Version)
	}
	p.cfgMu.Lock()
	defer p.cfgMu.Unlock()
	p.mu.Lock()
	configs := make([]*abipb.ConfigureRequest, 0, len(p.configs))
	for _, m := range p.configs {
		configs = append(configs, m)
	}
	p.forgotten = nil // the new process has none of them
	p.mu.Unlock()
	var refused []string
	for _, m := range configs {
		ctx, cancel := context.WithTimeout(context.Background(), p.opts.CallTimeout)
		resp, err := in.rpc.Configure(ctx, &pluginpb.ConfigureRequest{Configure: m})
		cancel()
		if err != nil {
			in.stop(stopGrace)
			return fmt.Errorf("configuring the restarted process: %s", grpcMessage(err))
		}
		if errs := resp.GetErrors(); len(errs) > 0 {
			refused = append(refused, fmt.Sprintf("config %d: %s", m.GetConfigId(), strings.Join(errs, "; ")))
		}
	}
	if len(refused) > 0 {
		p.logs.logger().Error("the restarted process refused configs it accepted before; their decisions fail", "refused", refused)
	}
	select {
	case <-p.closing:
		in.stop(stopGrace)
		return ErrClosed
	default:
	}
	p.inst.Store(in)
	n := p.restarts.Add(1)
	p.logs.logger().Info("process plugin restarted", "pid", in.pid, "restarts", n, "configs", len(configs))
	return nil
}

// stopAll stops the running process and one marked down, if any.
func (p *Plugin) stopAll() {
	if in := p.inst.Swap(nil); in != nil {
		in.stop(stopGrace)
	}
	p.mu.Lock()
	dead := p.dead
	p.dead = nil
	p.mu.Unlock()
	if dead != nil {
		dead.kill()
		dead.stop(stopGrace)
	}
}

// hostService is the Host service ruled serves to its plugin processes: it
// routes each call to the decision in flight that call_id names.
type hostService struct {
	pluginpb.UnimplementedHostServer
	p *Plugin
}

// newServer makes the gRPC server go-plugin's broker serves the Host
// service on.
func (s *hostService) newServer(opts []grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(pluginrpc.MaxMessage))...)
	pluginpb.RegisterHostServer(srv, s)
	return srv
}

// Eval implements pluginpb.HostServer: it runs the script through the
// decision's own sdk.Host. Failures are replies that carry an error.
func (s *hostService) Eval(ctx context.Context, req *pluginpb.EvalRequest) (*abipb.Reply, error) {
	s.p.hostEvals.Add(1)
	c := s.p.calls.get(req.GetCallId())
	if c == nil {
		return pluginrpc.ReplyErrorToPB(&abi.Error{Class: string(capability.ClassRefused),
			Message: fmt.Sprintf("no decision in progress with call id %d: Eval is allowed only during Decide", req.GetCallId())}), nil
	}
	e := req.GetEval()
	args, err := pluginrpc.ArgsFromPB(e.GetArgs())
	if err != nil {
		return pluginrpc.ReplyErrorToPB(&abi.Error{Class: string(capability.ClassRefused), Message: err.Error()}), nil
	}
	reply, err := c.host.Eval(ctx, e.GetScript(), e.GetKeys(), args...)
	if err != nil {
		c.err.Store(&err)
		return pluginrpc.ReplyErrorToPB(&abi.Error{Class: string(capability.ClassOf(err)), Message: err.Error()}), nil
	}
	return pluginrpc.ReplyToPB(reply), nil
}

// Log implements pluginpb.HostServer, within the plugin's log bounds.
func (s *hostService) Log(ctx context.Context, req *pluginpb.LogRequest) (*pluginpb.LogResponse, error) {
	var h sdk.Host
	if id := req.GetCallId(); id != 0 {
		if c := s.p.calls.get(id); c != nil {
			h = c.host
		}
	}
	s.p.logs.emit(h, slog.Level(req.GetLevel()), req.GetMessage())
	return &pluginpb.LogResponse{}, nil
}
