package process

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
	"github.com/ruled-dev/ruled/sdk/process/pluginrpc"
)

// stopGrace is how long a process may take to exit after go-plugin asked
// it to, before it is killed.
const stopGrace = time.Second

// instance is one running plugin process.
type instance struct {
	p       *Plugin
	client  *plugin.Client
	cmd     *exec.Cmd
	pid     int
	rpc     pluginpb.PluginClient
	conn    *grpc.ClientConn
	exited  <-chan struct{} // closed when the process has exited
	stopped chan struct{}   // closed when ruled stops it
	info    sdk.Info
	stepper *stepConn // its steps socket, when it decides in steps
	started time.Time
	sockDir string // the process's private socket directory

	timeouts atomic.Int32 // calls in a row that ran out of time
	stopOnce sync.Once
}

// dispensed is what go-plugin hands back for the plugin: the connection to
// the process and the broker to serve the Host service on.
type dispensed struct {
	done   context.Context
	broker *plugin.GRPCBroker
	conn   *grpc.ClientConn
}

// clientPlugin is ruled's side of go-plugin's plugin set.
type clientPlugin struct{ plugin.NetRPCUnsupportedPlugin }

// GRPCServer implements plugin.GRPCPlugin; ruled never serves a plugin.
func (clientPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("process: ruled does not serve plugins")
}

// GRPCClient implements plugin.GRPCPlugin. done is cancelled when the
// process exits.
func (clientPlugin) GRPCClient(done context.Context, b *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &dispensed{done: done, broker: b, conn: c}, nil
}

// start starts a process, connects to it, serves it the Host service and
// calls Init. The process is stopped again on any error.
func (p *Plugin) start(ctx context.Context) (_ *instance, err error) {
	// The process's sockets go in a private directory, removed when it
	// stops: a killed process cannot remove them itself.
	sockDir, err := os.MkdirTemp("", "ruled-plugin-")
	if err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	cmd := exec.Command(p.path)
	cmd.Env = append(append([]string{}, p.opts.Env...), plugin.EnvUnixSocketDir+"="+sockDir)
	cmd.SysProcAttr = sysProcAttr()
	stepsEnd, stepsChild, err := stepsSocket()
	if err != nil {
		_ = os.RemoveAll(sockDir)
		return nil, err
	}
	var stepsFD uint32
	if stepsChild != nil {
		cmd.ExtraFiles, stepsFD = []*os.File{stepsChild}, stepsChildFD
	}
	var secure *plugin.SecureConfig
	if p.checksum != nil {
		secure = &plugin.SecureConfig{Checksum: p.checksum, Hash: sha256.New()}
	}
	hcl := newHCLogger(p.logs)
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginrpc.Handshake(),
		Plugins:          plugin.PluginSet{pluginrpc.PluginName: clientPlugin{}},
		Cmd:              cmd,
		SecureConfig:     secure,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		SkipHostEnv:      true,
		StartTimeout:     p.opts.StartTimeout,
		Logger:           hcl,
		SyncStdout:       &lineWriter{emit: func(l string) { p.logs.emit(nil, slog.LevelInfo, "stdout: "+l) }},
		SyncStderr:       &lineWriter{emit: func(l string) { p.logs.emit(nil, slog.LevelWarn, "stderr: "+l) }},
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(pluginrpc.MaxMessage), grpc.MaxCallSendMsgSize(pluginrpc.MaxMessage))},
	})
	in := &instance{p: p, client: client, cmd: cmd, sockDir: sockDir, stopped: make(chan struct{}), started: time.Now()}
	defer func() {
		if err != nil {
			in.stop(stopGrace)
			if stepsEnd != nil && in.stepper == nil {
				_ = stepsEnd.Close()
			}
		}
	}()
	proto, err := client.Client()
	if stepsChild != nil {
		_ = stepsChild.Close() // the process has its own copy, or never will
	}
	if err != nil {
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			got, _ := pluginfile.Digest(p.path, pluginfile.MaxExecutable)
			return nil, fmt.Errorf("the executable changed since it was loaded: its sha256 is %s, the rule file pins %s; refusing to run it",
				got, hex.EncodeToString(p.checksum))
		}
		return nil, fmt.Errorf("starting: %w", err)
	}
	if cmd.Process != nil {
		in.pid = cmd.Process.Pid
	}
	raw, err := proto.Dispense(pluginrpc.PluginName)
	if err != nil {
		return nil, fmt.Errorf("connecting: %w", err)
	}
	d, ok := raw.(*dispensed)
	if !ok {
		return nil, fmt.Errorf("connecting: go-plugin dispensed %T", raw)
	}
	in.conn, in.exited = d.conn, d.done.Done()
	in.rpc = pluginpb.NewPluginClient(d.conn)
	hostID := d.broker.NextId()
	go d.broker.AcceptAndServe(hostID, p.hostSvc.newServer)

	ictx, cancel := context.WithTimeout(ctx, p.opts.StartTimeout)
	defer cancel()
	info, err := in.rpc.Init(ictx, &pluginpb.InitRequest{AbiVersion: abi.Version, HostService: hostID, StepsFd: stepsFD})
	if err != nil {
		return nil, fmt.Errorf("init: %s", grpcMessage(err))
	}
	in.info = pluginrpc.InfoFromPB(info)
	switch {
	case info.GetSteps() && stepsEnd != nil:
		deadline, _ := ictx.Deadline()
		if in.stepper, err = openStepConn(stepsEnd, deadline); err != nil {
			return nil, err
		}
	case stepsEnd != nil:
		_ = stepsEnd.Close() // the plugin decides through Decide
	}
	go in.watch()
	return in, nil
}

// watch marks the plugin down when the process exits on its own.
func (in *instance) watch() {
	select {
	case <-in.exited:
		why := "exited"
		if st := in.cmd.ProcessState; st != nil { // written before exited was closed
			why = "exited: " + st.String()
		}
		in.p.markDown(in, errors.New(why))
	case <-in.stopped:
	}
}

// stop stops the process: go-plugin asks it to exit and cleans up after
// it; a process that has not exited after grace is killed.
func (in *instance) stop(grace time.Duration) {
	in.stopOnce.Do(func() {
		close(in.stopped)
		if in.stepper != nil {
			in.stepper.close()
		}
		done := make(chan struct{})
		go func() {
			in.client.Kill()
			close(done)
		}()
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			in.kill()
			<-done
		}
		_ = os.RemoveAll(in.sockDir)
	})
}

// kill kills the process at once (it crashed or hangs).
func (in *instance) kill() {
	if in.cmd.Process != nil {
		_ = in.cmd.Process.Kill()
	}
}

// callFailed turns a failed gRPC call into an error and decides whether the
// process is gone (restart now) or may be hung (restart after HungAfter
// time-outs in a row). A call the caller gave up on says nothing of the
// plugin.
func (p *Plugin) callFailed(ctx context.Context, in *instance, what string, err error) error {
	if cerr := capability.ContextErr(ctx); cerr != nil {
		return &CallError{Plugin: p.info.Name, Func: what, Err: cerr}
	}
	code := status.Code(err)
	switch {
	case code == codes.DeadlineExceeded:
		if n := in.timeouts.Add(1); int(n) >= p.opts.HungAfter {
			p.markDown(in, fmt.Errorf("%d calls in a row took longer than %v: hung", n, p.opts.CallTimeout))
		}
		err = fmt.Errorf("no answer within %v: %w", p.opts.CallTimeout, context.DeadlineExceeded)
	case code == codes.Unavailable, code == codes.Canceled, in.hasExited():
		p.markDown(in, fmt.Errorf("connection lost: %s", grpcMessage(err)))
		err = fmt.Errorf("%w: %s", ErrDown, grpcMessage(err))
	default:
		err = errors.New(grpcMessage(err))
	}
	return &CallError{Plugin: p.info.Name, Func: what, Err: err}
}

func (in *instance) hasExited() bool {
	select {
	case <-in.exited:
		return true
	default:
		return false
	}
}

// grpcMessage describes a gRPC error without the "rpc error:" noise.
func grpcMessage(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// healthCheck asks the process's gRPC health service whether it serves.
func (in *instance) healthCheck(timeout time.Duration) error {
	if in.hasExited() {
		return errors.New("exited")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(in.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err != nil {
		return fmt.Errorf("health check: %s", grpcMessage(err))
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check: %s", resp.GetStatus())
	}
	return nil
}
