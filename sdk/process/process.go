// Package process turns an sdk.Algorithm into a ruled process plugin: an
// executable that ruled starts, supervises and talks to over gRPC
// (hashicorp/go-plugin, protocol version 1, the services of
// sdk/abi/plugin.proto).
//
// A plugin's main package hands its algorithm to Serve:
//
//	package main
//
//	import (
//		"example.com/myplugin"
//		"github.com/ruled-dev/ruled/sdk/process"
//	)
//
//	func main() { process.Serve(myplugin.New()) }
//
// built with a plain `go build`, and declared in a rule file:
//
//	plugins:
//	  mine: {process: ./bin/myplugin, sha256: "…"}
//
// The same algorithm builds as a Wasm module with sdk/guest. Inside the
// process, Decide gets an sdk.Host whose Eval and Log go back to ruled over
// one persistent connection (the go-plugin broker): ruled runs the script
// with the decision's own key namespace, ACL user and time-outs, exactly as
// for a native plugin. The context Decide receives carries ruled's per-call
// deadline. Panics in Configure and Decide are recovered and reported as
// errors. The process has no Redis credentials and does not inherit ruled's
// environment.
//
// The process exits when ruled stops it, and on its own when ruled is gone
// (it watches its parent process), so that no plugin outlives the daemon.
package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// parentPoll is how often the process checks that ruled is still there.
const parentPoll = 500 * time.Millisecond

// logTimeout bounds one Log call to ruled.
const logTimeout = time.Second

// Serve runs alg as a ruled process plugin and returns only when ruled
// stops the plugin (it then exits the process). Call it from main. Run by
// hand rather than by ruled, the executable prints that it is a plugin and
// exits with status 1.
func Serve(alg sdk.Algorithm) {
	if alg == nil {
		fmt.Fprintln(os.Stderr, "process: Serve(nil)")
		os.Exit(2)
	}
	// go-plugin replaces os.Stderr with a stream to ruled; ruled reads
	// structured log lines from the real one.
	logger := hclog.New(&hclog.LoggerOptions{Name: alg.Info().Name, Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	if os.Getenv(pluginrpc.MagicCookieKey) == pluginrpc.MagicCookieValue {
		go watchParent(logger, os.Getppid())
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: pluginrpc.Handshake(),
		Plugins:         plugin.PluginSet{pluginrpc.PluginName: &grpcPlugin{alg: alg, log: logger}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(pluginrpc.MaxMessage))...)
		},
		Logger: logger,
	})
}

// watchParent exits the process when its parent, ruled, is gone: the
// process was handed to another parent. On Linux ruled also asks the kernel
// to kill the plugin when it dies; this covers the other systems and the
// case where that signal was lost.
func watchParent(log hclog.Logger, ppid int) {
	for {
		time.Sleep(parentPoll)
		if os.Getppid() != ppid {
			log.Warn("ruled is gone; exiting", "parent", ppid)
			os.Exit(1)
		}
	}
}

// grpcPlugin is the plugin side of go-plugin's plugin set.
type grpcPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	alg sdk.Algorithm
	log hclog.Logger
}

// GRPCServer implements plugin.GRPCPlugin: it registers the Plugin service.
func (p *grpcPlugin) GRPCServer(broker *plugin.GRPCBroker, s *grpc.Server) error {
	pluginpb.RegisterPluginServer(s, newServer(p.alg, broker, p.log))
	return nil
}

// GRPCClient implements plugin.GRPCPlugin; a plugin is never a client.
func (p *grpcPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("process: a plugin does not dispense clients")
}

// dialer opens the connection to ruled's Host service.
type dialer func(id uint32) (*grpc.ClientConn, error)

// server implements the Plugin service over one algorithm.
type server struct {
	pluginpb.UnimplementedPluginServer
	alg     sdk.Algorithm
	stepper sdk.Stepper // alg, when it decides in steps
	dial    dialer
	log     hclog.Logger

	mu      sync.RWMutex
	configs map[uint64]sdk.Config
	conn    *grpc.ClientConn // to ruled's Host service

	host atomic.Pointer[pluginpb.HostClient]

	stepsOnce sync.Once // the steps socket is taken once
}

func newServer(alg sdk.Algorithm, broker *plugin.GRPCBroker, log hclog.Logger) *server {
	s := &server{alg: alg, log: log, configs: map[uint64]sdk.Config{}}
	s.stepper, _ = alg.(sdk.Stepper)
	if broker != nil {
		s.dial = func(id uint32) (*grpc.ClientConn, error) {
			return broker.DialWithOptions(id, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(pluginrpc.MaxMessage)))
		}
	}
	return s
}

// Init implements pluginpb.PluginServer: it connects to ruled's Host
// service, once, and answers the algorithm's Info.
func (s *server) Init(_ context.Context, req *pluginpb.InitRequest) (*abipb.Info, error) {
	if req.GetAbiVersion() != abi.Version {
		return nil, fmt.Errorf("process: ruled speaks ABI %d, this plugin ABI %d", req.GetAbiVersion(), abi.Version)
	}
	if s.dial != nil {
		conn, err := s.dial(req.GetHostService())
		if err != nil {
			return nil, fmt.Errorf("process: connecting to ruled's host service: %w", err)
		}
		conn.Connect()
		client := pluginpb.NewHostClient(conn)
		s.mu.Lock()
		old := s.conn
		s.conn = conn
		s.host.Store(&client)
		s.mu.Unlock()
		if old != nil {
			_ = old.Close()
		}
	}
	info := s.alg.Info()
	pb := pluginrpc.InfoToPB(&info)
	pb.Steps = s.stepper != nil
	if fd := req.GetStepsFd(); fd != 0 && pb.Steps {
		if err := s.openSteps(fd); err != nil {
			return nil, err
		}
	}
	return pb, nil
}

// Configure implements pluginpb.PluginServer.
func (s *server) Configure(_ context.Context, req *pluginpb.ConfigureRequest) (*abipb.ConfigureResponse, error) {
	s.mu.Lock()
	for _, id := range req.GetForget() {
		delete(s.configs, id)
	}
	s.mu.Unlock()
	creq, err := pluginrpc.ConfigureFromPB(req.GetConfigure())
	if err != nil {
		return nil, err
	}
	if creq.ConfigID == 0 {
		return nil, errors.New("process: config id 0")
	}
	cfg, err := s.configure(creq.Config)
	if err != nil {
		return &abipb.ConfigureResponse{Errors: pluginrpc.ConfigErrors(err, nil)}, nil
	}
	var resp abi.ConfigureResponse
	if t, ok := s.alg.(sdk.Templater); ok {
		if tmpl, ok := t.Template(cfg); ok {
			if err := sdk.CheckTemplate(tmpl); err != nil {
				return nil, fmt.Errorf("process: %T.Template: %w", s.alg, err)
			}
			resp.Template = &tmpl
		}
	}
	s.mu.Lock()
	s.configs[creq.ConfigID] = cfg
	s.mu.Unlock()
	return pluginrpc.ConfigureResponseToPB(&resp)
}

func (s *server) configure(raw map[string]any) (cfg sdk.Config, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("Configure panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			cfg, err = nil, fmt.Errorf("plugin panicked in Configure: %v", v)
		}
	}()
	return s.alg.Configure(raw)
}

// Decide implements pluginpb.PluginServer. A failure to decide is an
// answer with an error, not a gRPC error.
func (s *server) Decide(ctx context.Context, req *pluginpb.DecideRequest) (*abipb.DecideResponse, error) {
	dreq := req.GetDecide()
	s.mu.RLock()
	cfg, ok := s.configs[dreq.GetConfigId()]
	s.mu.RUnlock()
	if !ok {
		return &abipb.DecideResponse{Error: fmt.Sprintf("unknown config id %d", dreq.GetConfigId())}, nil
	}
	h := &remoteHost{s: s, call: req.GetCallId()}
	d, err := s.decide(ctx, h, cfg, pluginrpc.RequestFromPB(dreq))
	if err != nil {
		return pluginrpc.DecideErrorToPB(err), nil
	}
	return &abipb.DecideResponse{Decision: pluginrpc.DecisionToPB(&d)}, nil
}

// answerStep answers one step of an algorithm that decides in steps
// (sdk.Stepper), as sdk/guest answers ruled_step: a failure to decide is
// an answer with an error.
func (s *server) answerStep(ctx context.Context, req *abi.StepRequest) abi.StepResponse {
	var resp abi.StepResponse
	s.mu.RLock()
	cfg, ok := s.configs[req.ConfigID]
	s.mu.RUnlock()
	if !ok {
		resp.Error = fmt.Sprintf("unknown config id %d", req.ConfigID)
		return resp
	}
	resp.SetStep(s.step(ctx, cfg, req.Request, req.Prev(), req.Reply))
	return resp
}

// serveSteps answers the steps ruled sends on the steps socket, in turn,
// until ruled closes it (a Stepper's Start and Resume do not block, so one
// goroutine keeps up). Answers are flushed when no whole step is waiting,
// so that a burst of steps costs one write.
func (s *server) serveSteps(conn net.Conn, r *bufio.Reader, w *bufio.Writer) {
	defer conn.Close()
	ctx := context.Background()
	var in, out []byte
	for {
		var call abi.StepCall
		var a abi.StepAnswer
		var err error
		switch in, err = pluginrpc.ReadFrame(r, in, &call); {
		case err == nil:
			a = abi.StepAnswer{ID: call.ID, Step: s.answerStep(ctx, &call.Step)}
		case call.ID != 0: // read whole, but its step does not decode
			a = abi.StepAnswer{ID: call.ID, Step: errorAnswer(err)}
		default:
			if !errors.Is(err, io.EOF) {
				s.log.Error("steps socket", "error", err)
			}
			return
		}
		if out, err = pluginrpc.AppendFrame(out[:0], &a); err != nil {
			// An argument that cannot cross: the decision fails, as Eval
			// with it would have.
			a.Step = errorAnswer(fmt.Errorf("step call %s: %w", a.Step.Call.Script, err))
			out, _ = pluginrpc.AppendFrame(out[:0], &a)
		}
		_, err = w.Write(out)
		if err == nil && !pluginrpc.FrameBuffered(r) {
			err = w.Flush()
		}
		if err != nil {
			s.log.Error("steps socket", "error", err)
			return
		}
	}
}

// errorAnswer is a step's answer that fails the decision with err.
func errorAnswer(err error) abi.StepResponse {
	return abi.StepResponse{DecideResponse: abi.DecideResponse{Error: err.Error()}}
}

// openSteps takes the steps socket ruled offered at fd and says hello on
// it, once per process.
func (s *server) openSteps(fd uint32) error {
	var err error
	s.stepsOnce.Do(func() {
		f := os.NewFile(uintptr(fd), "ruled-steps")
		if f == nil {
			err = fmt.Errorf("process: the steps socket %d is not a file descriptor", fd)
			return
		}
		conn, ferr := net.FileConn(f)
		_ = f.Close()
		if ferr != nil {
			err = fmt.Errorf("process: the steps socket: %w", ferr)
			return
		}
		w := bufio.NewWriterSize(conn, 64<<10)
		hello, _ := pluginrpc.AppendFrame(nil, &abi.StepAnswer{})
		if _, err = w.Write(hello); err == nil {
			err = w.Flush()
		}
		if err != nil {
			_ = conn.Close()
			err = fmt.Errorf("process: saying hello on the steps socket: %w", err)
			return
		}
		go s.serveSteps(conn, bufio.NewReaderSize(conn, 64<<10), w)
	})
	return err
}

func (s *server) step(ctx context.Context, cfg sdk.Config, r sdk.Request, prev *sdk.Step, reply sdk.Reply) (step sdk.Step, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("Step panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			step, err = sdk.Step{}, fmt.Errorf("plugin panicked: %v", v)
		}
	}()
	return sdk.NextStep(ctx, s.stepper, cfg, r, prev, reply)
}

func (s *server) decide(ctx context.Context, h sdk.Host, cfg sdk.Config, r sdk.Request) (d sdk.Decision, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("Decide panicked", "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			d, err = sdk.Decision{}, fmt.Errorf("plugin panicked: %v", v)
		}
	}()
	return s.alg.Decide(ctx, h, cfg, r)
}

// remoteHost is the sdk.Host a decision receives: its calls go to ruled
// with the decision's call id.
type remoteHost struct {
	s    *server
	call uint64
}

// Eval implements sdk.Host through ruled's Host service.
func (h *remoteHost) Eval(ctx context.Context, script string, keys []string, args ...any) (sdk.Reply, error) {
	client := h.s.host.Load()
	if client == nil {
		return sdk.Reply{}, fmt.Errorf("process: Eval %s: not connected to ruled", script)
	}
	pbArgs, err := pluginrpc.ArgsToPB(args)
	if err != nil {
		return sdk.Reply{}, fmt.Errorf("process: Eval %s: %w", script, err)
	}
	reply, err := (*client).Eval(ctx, &pluginpb.EvalRequest{CallId: h.call,
		Eval: &abipb.EvalRequest{Script: script, Keys: keys, Args: pbArgs}})
	if err != nil {
		return sdk.Reply{}, fmt.Errorf("process: Eval %s: %w", script, err)
	}
	return pluginrpc.ReplyFromPB(reply)
}

// Log implements sdk.Host through ruled's Host service. Lines that cannot
// be delivered go to the process's own log.
func (h *remoteHost) Log(level sdk.Level, msg string) {
	client := h.s.host.Load()
	if client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), logTimeout)
		_, err := (*client).Log(ctx, &pluginpb.LogRequest{CallId: h.call, Level: int32(level), Message: msg})
		cancel()
		if err == nil {
			return
		}
	}
	h.s.log.Log(hclogLevel(level), msg)
}

func hclogLevel(l sdk.Level) hclog.Level {
	switch {
	case l >= sdk.LevelError:
		return hclog.Error
	case l >= sdk.LevelWarn:
		return hclog.Warn
	case l >= sdk.LevelInfo:
		return hclog.Info
	default:
		return hclog.Debug
	}
}
