package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// remaining is what the window rule has left for ip, asked with hits 0.
func (d *daemon) remaining(ip string) int64 {
	d.t.Helper()
	code, text := d.postJSON("/v1/check", `{"request": {"ip": "`+ip+`"}, "hits": 0}`)
	var a struct {
		Results []struct {
			Remaining int64 `json:"remaining"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(text), &a); err != nil || code != http.StatusOK || len(a.Results) != 1 {
		d.t.Fatalf("peek: %d %s", code, text)
	}
	return a.Results[0].Remaining
}

// gRPC has no admin token: under --client-refunds=admin and deny a real
// Envoy rate limit client's is_negative_hits is refused (PermissionDenied)
// and gives nothing back, while under the default, allow, it gives the hit
// back. Plain descriptors are decided in every mode.
func TestGRPCNegativeHitsFollowClientRefunds(t *testing.T) {
	for _, tc := range []struct {
		mode string
		args []string
		code codes.Code
		left int64 // of the window's 10, after one hit and the refund
	}{
		{"allow", nil, codes.OK, 10},
		{"admin", []string{"--client-refunds=admin", "--admin-token", "s3cret-admin-token"}, codes.PermissionDenied, 9},
		{"deny", []string{"--client-refunds=deny"}, codes.PermissionDenied, 9},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			grpcAddr := freePort(t)
			d := spawnDaemon(t, forgeRules, append([]string{"--grpc-listen", grpcAddr}, tc.args...)...)
			d.waitReady(15 * time.Second)
			conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			rls := rlsv3.NewRateLimitServiceClient(conn)
			const ip = "198.51.100.7"
			descriptor := func() *rlcommonv3.RateLimitDescriptor {
				return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: ip}}}
			}
			ask := func(d *rlcommonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				return rls.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
			}
			if resp, err := ask(descriptor()); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
				t.Fatalf("a plain descriptor: %v, %v; want OK", resp, err)
			}
			refund := descriptor()
			refund.HitsAddend, refund.IsNegativeHits = wrapperspb.UInt64(1), true
			_, err = ask(refund)
			if status.Code(err) != tc.code {
				t.Errorf("is_negative_hits: %v, want %v", err, tc.code)
			}
			if tc.code == codes.PermissionDenied && err != nil && !strings.Contains(err.Error(), "--client-refunds") {
				t.Errorf("is_negative_hits refused with %q, want the message to name --client-refunds", err)
			}
			if got := d.remaining(ip); got != tc.left {
				t.Fatalf("remaining %d after one hit and the refund, want %d", got, tc.left)
			}
		})
	}
}

// --client-refunds=admin without an admin token would refuse every HTTP
// refund and there would be no way to give one: serve refuses to start
// (exit 2) and says why, from the flag or from RULED_CLIENT_REFUNDS.
func TestClientRefundsAdminNeedsAToken(t *testing.T) {
	bin := buildRuled(t)
	rules := writeFile(t, t.TempDir(), "rules.yaml", forgeRules)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RULED_") {
			env = append(env, kv)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
	}{
		{"flag", []string{"--client-refunds=admin"}, nil},
		{"environment", nil, []string{"RULED_CLIENT_REFUNDS=admin"}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--rules", rules, "--listen", freePort(t), "--data-dir", t.TempDir()}, tc.args...)...)
		cmd.Env = append(env, tc.env...)
		out, err := cmd.CombinedOutput()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "--client-refunds=admin needs --admin-token") {
			t.Errorf("%s: exit %d (%v), output %q; want exit 2 saying --client-refunds=admin needs --admin-token", tc.name, code, err, tail(string(out), 10))
		}
	}
}
