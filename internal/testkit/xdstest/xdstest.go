// Package xdstest runs an xDS management server shaped like Envoy
// Gateway's rate limit runner, for tests: go-control-plane's snapshot cache
// and ADS server (state of the world), serving RateLimitConfig resources to
// the node envoy-ratelimit, and recording the ACKs and NACKs it gets.
package xdstest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"
)

// NodeID is the node Envoy Gateway serves the rate limit configs to.
const NodeID = "envoy-ratelimit"

// Server is a go-control-plane snapshot server shaped like Envoy Gateway's
// rate limit runner: ADS, state of the world, one snapshot for NodeID.
type Server struct {
	cache cache.SnapshotCache
	// Addr is where it listens.
	Addr  string
	srv   *grpc.Server
	creds credentials.TransportCredentials

	mu     sync.Mutex
	nacks  []string // error details of the requests that refused a response
	acks   []string // versions the client reported holding
	opened []string // the version each stream's first request reported
}

// Start serves on a free loopback port, over TLS with creds when not nil,
// until the test ends.
func Start(t testing.TB, creds credentials.TransportCredentials) *Server {
	t.Helper()
	cp := &Server{cache: cache.NewSnapshotCache(true, cache.IDHash{}, nil), creds: creds}
	cp.serve(t, "127.0.0.1:0")
	return cp
}

// Stop stops the server, ending its streams.
func (cp *Server) Stop() { cp.srv.Stop() }

// Restart serves again on the same address, with the snapshot it had.
func (cp *Server) Restart(t testing.TB) {
	t.Helper()
	cp.serve(t, cp.Addr)
}

// serve starts the gRPC server on addr.
func (cp *Server) serve(t testing.TB, addr string) {
	t.Helper()
	creds := cp.creds
	cb := server.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discoverygrpc.DiscoveryRequest) error {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if req.GetNode().GetId() != NodeID {
			return fmt.Errorf("node %q", req.GetNode().GetId())
		}
		switch {
		case req.GetErrorDetail() != nil:
			cp.nacks = append(cp.nacks, req.GetErrorDetail().GetMessage())
		case req.GetResponseNonce() != "":
			cp.acks = append(cp.acks, req.GetVersionInfo())
		default:
			cp.opened = append(cp.opened, req.GetVersionInfo())
		}
		return nil
	}}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	cp.srv = grpc.NewServer(opts...)
	discoverygrpc.RegisterAggregatedDiscoveryServiceServer(cp.srv, server.NewServer(context.Background(), cp.cache, cb))
	var ln net.Listener
	var err error
	for range 50 { // the port of a stopped server may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	cp.Addr = ln.Addr().String()
	go func() { _ = cp.srv.Serve(ln) }()
	t.Cleanup(cp.srv.Stop)
}

// Push makes cfgs the resources of version, sent to every stream of
// NodeID.
func (cp *Server) Push(t testing.TB, version string, cfgs ...*rlsconf.RateLimitConfig) {
	t.Helper()
	res := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		res[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: res})
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), NodeID, snap); err != nil {
		t.Fatal(err)
	}
}

// Opened returns the version each stream's first request reported
// holding, in order.
func (cp *Server) Opened() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.opened...)
}

// Seen returns the versions the client ACKed (the version it reported
// holding after each response) and the error details of its NACKs, in
// order.
func (cp *Server) Seen() (acks, nacks []string) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.acks...), append([]string(nil), cp.nacks...)
}

// Limit is a config of domain with one descriptor key, limited to n an
// hour (a window no test crosses).
func Limit(domain, key string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: n}}}}
}

// FromYAML reads an envoy ratelimit config file into the RateLimitConfig
// resource with the same content (protojson takes the YAML's field names;
// units are upper-cased). It fails the test on a field the resource does
// not have.
func FromYAML(t testing.TB, content []byte) *rlsconf.RateLimitConfig {
	t.Helper()
	res, err := ParseYAML(content)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// ParseYAML is FromYAML returning its error.
func ParseYAML(content []byte) (*rlsconf.RateLimitConfig, error) {
	var v any
	if err := yaml.Unmarshal(content, &v); err != nil {
		return nil, err
	}
	upperUnits(v)
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	res := &rlsconf.RateLimitConfig{}
	if err := protojson.Unmarshal(b, res); err != nil {
		return nil, err
	}
	return res, nil
}

func upperUnits(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "unit" {
				v[k] = strings.ToUpper(s)
			}
			upperUnits(x)
		}
	case []any:
		for _, x := range v {
			upperUnits(x)
		}
	}
}
