// Package xds serves the rate limit configs an xDS management server
// pushes, as Envoy Gateway does to envoy ratelimit: it subscribes to
// ratelimit.config.ratelimit.v3.RateLimitConfig resources over ADS, state
// of the world, translates each update with internal/envoyconfig (the
// translation of `ruled import envoy`), loads it into the engine as one
// rule set, and ACKs it, or NACKs it with the positioned reasons while the
// rules before it keep serving.
package xds

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/internal/envoyconfig"
	"github.com/ruled-dev/ruled/rules"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Options configure a Client.
type Options struct {
	// Server is the management server's address, host:port.
	Server string
	// TLS, when not nil, is the client side of the connection (its
	// certificate for mTLS, the CA that signs the server's); nil dials in
	// plaintext.
	TLS *tls.Config
	// NodeID is the node the client says it is (Envoy Gateway serves
	// "envoy-ratelimit"), and NodeMetadata that node's metadata.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent with the stream, as gRPC metadata.
	Headers map[string]string
	// MaxRecvMsgSize bounds one response; 0 is gRPC's default (4 MiB).
	MaxRecvMsgSize int
	// MergeDomains merges resources of one domain (envoyconfig.Options).
	MergeDomains bool
	// BackoffInitial and BackoffMax bound the wait before the stream is
	// opened again after one that ended without any response; a stream
	// that delivered a response is reopened at once. Defaults 1 s and 30 s;
	// the wait is randomised by ±BackoffJitter (0 to 1, default 0.5).
	BackoffInitial, BackoffMax time.Duration
	BackoffJitter              float64
	// Logger receives connection changes and each update's outcome.
	Logger *slog.Logger
	// OnTranslate, when set, is given each update's translation before it
	// loads (envoystats.Sink.SetKeys).
	OnTranslate func(files []envoyconfig.File)
}

// State is what the client knows of its stream and its configs.
type State struct {
	// Connected reports whether a stream to the server is open.
	Connected bool
	// Configured reports whether a config from the server was loaded.
	Configured bool
	// Version is the version of the last config loaded (ACKed).
	Version string
	// Resources is how many resources it held.
	Resources int
	// LastError is why the last refused update was refused (NACKed), or
	// nil when the last update was loaded.
	LastError error
}

// Client follows a management server's RateLimitConfig resources and keeps
// the engine's rules in line with them. Its methods are safe for
// concurrent use.
type Client struct {
	engine *host.Engine
	opts   Options
	log    *slog.Logger

	mu    sync.Mutex
	state State
}

// New returns a client that loads the configs it receives into engine; Run
// starts it.
func New(engine *host.Engine, opts Options) *Client {
	if opts.BackoffInitial <= 0 {
		opts.BackoffInitial = time.Second
	}
	if opts.BackoffMax < opts.BackoffInitial {
		opts.BackoffMax = max(30*time.Second, opts.BackoffInitial)
	}
	if opts.BackoffJitter <= 0 || opts.BackoffJitter > 1 {
		opts.BackoffJitter = 0.5
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{engine: engine, opts: opts, log: log.With("component", "xds", "server", opts.Server)}
}

// State returns what the client knows now.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// ReadyErr returns nil once a config from the server was loaded, else why
// the rules are not the server's yet.
func (c *Client) ReadyErr() error {
	st := c.State()
	switch {
	case st.Configured:
		return nil
	case st.LastError != nil:
		return fmt.Errorf("xds: no config loaded from %s yet: the last one was refused: %w", c.opts.Server, st.LastError)
	case !st.Connected:
		return fmt.Errorf("xds: no config loaded from %s yet: not connected", c.opts.Server)
	default:
		return fmt.Errorf("xds: no config loaded from %s yet", c.opts.Server)
	}
}

// origin is how the engine's status names the rules the client loads.
func (c *Client) origin() string { return "xds://" + c.opts.Server }

// Run dials the server and follows its configs until ctx ends, opening
// the stream again whenever it ends. It returns nil when ctx ends, or the
// error of a connection that cannot be set up at all.
func (c *Client) Run(ctx context.Context) error {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		creds = credentials.NewTLS(c.opts.TLS)
	}
	dial := []grpc.DialOption{grpc.WithTransportCredentials(creds), grpc.WithUserAgent("ruled")}
	if c.opts.MaxRecvMsgSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxRecvMsgSize)))
	}
	conn, err := grpc.NewClient(c.opts.Server, dial...)
	if err != nil {
		return fmt.Errorf("xds: %s: %w", c.opts.Server, err)
	}
	defer conn.Close()
	if len(c.opts.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers))
	}
	wait := c.opts.BackoffInitial
	for {
		received, err := c.stream(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			wait = c.opts.BackoffInitial
			c.log.Warn("xds stream ended; opening it again", "err", err)
			continue
		}
		d := jitter(wait, c.opts.BackoffJitter)
		c.log.Warn("xds stream failed; opening it again after a pause", "err", err, "after", d.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		wait = min(2*wait, c.opts.BackoffMax)
	}
}

// jitter randomises d by ±f.
func jitter(d time.Duration, f float64) time.Duration {
	return time.Duration(float64(d) * (1 + f*(2*rand.Float64()-1)))
}

// stream runs one ADS stream until it ends and reports whether it
// delivered any response. Its first request carries the version of the
// config loaded last, as Envoy's does, so that a server with nothing newer
// need not send it again.
func (c *Client) stream(ctx context.Context, conn *grpc.ClientConn) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// WaitForReady: the stream opens once the connection is up, on gRPC's
	// own reconnect schedule, instead of failing at once while it is down.
	ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	node := c.node()
	version := c.State().Version
	send := func(nonce string, refused error) error {
		req := &discoveryv3.DiscoveryRequest{Node: node, VersionInfo: version, TypeUrl: TypeURL, ResponseNonce: nonce}
		if refused != nil {
			req.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: refused.Error()}
		}
		return ads.Send(req)
	}
	if err := send("", nil); err != nil {
		return false, err
	}
	c.setConnected(true)
	defer c.setConnected(false)
	c.log.Info("xds stream open", "node", c.opts.NodeID, "type", TypeURL)
	for {
		resp, err := ads.Recv()
		if err != nil {
			return received, err
		}
		received = true
		n := len(resp.GetResources())
		lerr := c.apply(ctx, resp)
		if lerr != nil {
			c.log.Error("xds config refused; the rules before it keep serving", "version", resp.GetVersionInfo(), "resources", n, "err", lerr)
		} else {
			version = resp.GetVersionInfo()
			c.log.Info("xds config loaded", "version", version, "resources", n, "rules", len(c.engine.Rules().Rules()))
		}
		if err := send(resp.GetNonce(), lerr); err != nil {
			return received, err
		}
	}
}

// node is the node the client says it is.
func (c *Client) node() *corev3.Node {
	n := &corev3.Node{Id: c.opts.NodeID, UserAgentName: "ruled"}
	if len(c.opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(c.opts.NodeMetadata))
		for k, v := range c.opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

// apply loads one response's resources as the engine's rules; its error
// is why they were refused.
func (c *Client) apply(ctx context.Context, resp *discoveryv3.DiscoveryResponse) error {
	if resp.GetTypeUrl() != TypeURL {
		return c.refuse(fmt.Errorf("a response of type %s: want %s", resp.GetTypeUrl(), TypeURL))
	}
	srcs := make([]envoyconfig.Source, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		cfg := &rlsconf.RateLimitConfig{}
		if err := a.UnmarshalTo(cfg); err != nil {
			return c.refuse(fmt.Errorf("resource %d: want a %s: %w", i, TypeURL, err))
		}
		srcs = append(srcs, envoyconfig.FromXDS(cfg))
	}
	files, _, err := envoyconfig.Translate(srcs, envoyconfig.Options{MergeDomains: c.opts.MergeDomains})
	if err != nil {
		return c.refuse(err)
	}
	if c.opts.OnTranslate != nil {
		c.opts.OnTranslate(files)
	}
	ruleSrcs := envoyconfig.RuleSources(files)
	_, err = c.engine.LoadFrom(ctx, host.RuleSource{Origin: c.origin(), Read: func(context.Context) (*rules.Files, error) {
		return rules.ParseSources(ruleSrcs)
	}})
	if err != nil {
		return c.refuse(err)
	}
	c.mu.Lock()
	c.state = State{Connected: c.state.Connected, Configured: true, Version: resp.GetVersionInfo(), Resources: len(srcs)}
	c.mu.Unlock()
	return nil
}

func (c *Client) refuse(err error) error {
	c.mu.Lock()
	c.state.LastError = err
	c.mu.Unlock()
	return err
}

func (c *Client) setConnected(v bool) {
	c.mu.Lock()
	c.state.Connected = v
	c.mu.Unlock()
}
