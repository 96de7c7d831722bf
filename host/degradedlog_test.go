package host_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/plugins/builtin"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDegradedDecisionsLogOncePerRule: while Redis is down every decision
// degrades, but each rule writes one WARN line per 10 s; the others go to
// DEBUG.
func TestDegradedDecisionsLogOncePerRule(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			srv := redistest.Start(t)
			client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = client.Close() })
			var logs syncBuffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
			// The circuit never opens: every call goes to Redis and fails.
			cap := capability.New(client, capability.Options{Timeout: time.Second, BreakerFailures: 1 << 30, Logger: log})
			e, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtin.All(), Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "rules.yaml")
			if err := os.WriteFile(path, []byte(policyRules), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Load(context.Background(), path); err != nil {
				t.Fatal(err)
			}
			srv.Kill()
			for range 10 {
				res := e.Check(context.Background(), &host.CheckRequest{Request: host.Request{IP: "192.0.2.9"}, Hits: 1})
				if !res.Allowed || res.Results[0].Degraded == host.DegradedNone {
					t.Fatalf("not degraded: %+v", res)
				}
			}
			warn, debug := 0, 0
			for _, l := range strings.Split(logs.String(), "\n") {
				if !strings.Contains(l, `msg="decision degraded"`) {
					continue
				}
				switch {
				case strings.Contains(l, "level=WARN"):
					warn++
				case strings.Contains(l, "level=DEBUG"):
					debug++
				}
			}
			// Two rules match (open, local): one WARN line each.
			wantDebug := 0
			if level == slog.LevelDebug {
				wantDebug = 18
			}
			if warn != 2 || debug != wantDebug {
				t.Fatalf("WARN lines %d, DEBUG lines %d; want 2 and %d:\n%s", warn, debug, wantDebug, logs.String())
			}
		})
	}
}
