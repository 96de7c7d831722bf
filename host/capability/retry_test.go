package capability_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// replyDropper forwards connections to a redis-server and, when armed,
// closes the next connection to read a reply instead of passing the reply
// on: the command ran, but its client cannot know.
type replyDropper struct {
	ln    net.Listener
	armed atomic.Bool
	wg    sync.WaitGroup
}

func newReplyDropper(t *testing.T, target string) *replyDropper {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &replyDropper{ln: ln}
	d.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			d.wg.Go(func() { _, _ = io.Copy(s, c); _ = s.Close() })
			d.wg.Go(func() {
				defer c.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 && d.armed.CompareAndSwap(true, false) {
						_ = s.Close()
						return
					}
					if n > 0 {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); d.wg.Wait() })
	return d
}

// A script call whose reply is lost (the connection dropped after the
// script ran) fails; it is never sent again, which would count its hits
// twice. The client here retries as go-redis does by default: the
// capability's calls must not let it.
func TestAScriptWhoseReplyIsLostIsNotRunTwice(t *testing.T) {
	srv := redistest.Start(t)
	for _, mode := range []struct {
		name string
		pipe *redis.AutoPipelineOptions
	}{{"direct", nil}, {"pipelining, a call alone", redis.DefaultBlockingAutoPipelineOptions()}} {
		t.Run(mode.name, func(t *testing.T) {
			d := newReplyDropper(t, srv.Addr())
			client := redis.NewClient(&redis.Options{Addr: d.ln.Addr().String(), ContextTimeoutEnabled: true,
				MaxRetries: 3, PoolSize: 1})
			t.Cleanup(func() { _ = client.Close() })
			c := capability.New(client, capability.Options{Timeout: 2 * time.Second, Pipeline: mode.pipe})
			p, err := c.Register("retry", []sdk.Script{{Name: "incr", Source: `return redis.call('INCR', KEYS[1])`, Commands: []string{"INCR"}}})
			if err != nil {
				t.Fatal(err)
			}
			h := p.Host("r", mode.name)
			if _, err := h.Eval(context.Background(), "incr", []string{"n"}); err != nil { // loads the script
				t.Fatal(err)
			}
			d.armed.Store(true)
			if _, err := h.Eval(context.Background(), "incr", []string{"n"}); err == nil {
				t.Fatal("a call whose reply was lost succeeded")
			}
			if d.armed.Load() {
				t.Fatal("the reply was not dropped: the test did not test that")
			}
			r, err := h.Eval(context.Background(), "incr", []string{"n"})
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := r.Int64(); n != 3 {
				t.Fatalf("the third call counts %d, want 3: the lost call ran %d times", n, n-2)
			}
		})
	}
}
