package main

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ruled-dev/ruled/internal/testkit/redistest"
)

// TestServeGRPC starts serve with --grpc-listen and asks Envoy's rate limit
// service over gRPC: the third call with the same remote_address is over
// the limit. Serve stops cleanly with the gRPC server running.
func TestServeGRPC(t *testing.T) {
	rs := redistest.Start(t)
	dir := t.TempDir()
	rules := writeFile(t, dir, "rules.yaml", `rules:
  - name: per-ip
    subject: request.ip
    plugin: fixedwindow
    config: {limit: 2, window: 1m}
`)
	httpAddr, grpcAddr := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--rules", rules, "--listen", httpAddr, "--redis", rs.URL(), "--grpc-listen", grpcAddr, "--watch=false"}, &out, &errOut)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("serve exited %d: %s", code, errOut.String())
			}
		case <-time.After(15 * time.Second):
			t.Error("serve did not stop within 15s")
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within 10s: %v\n%s", err, errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "198.51.100.1"}}},
	}}
	var codes []rlsv3.RateLimitResponse_Code
	for i := 0; i < 3; i++ {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := rls.ShouldRateLimit(cctx, req)
		ccancel()
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		codes = append(codes, resp.OverallCode)
	}
	want := []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT}
	for i := range want {
		if codes[i] != want[i] {
			t.Fatalf("codes %v, want %v", codes, want)
		}
	}
}
