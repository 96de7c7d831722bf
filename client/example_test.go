package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/ruled-dev/ruled/client"
)

func ExampleClient_Check() {
	c := client.New("http://127.0.0.1:8080", client.WithTimeout(500*time.Millisecond))
	ans, err := c.Check(context.Background(), client.CheckRequest{
		Request: client.Request{IP: "203.0.113.7", Method: "POST", Path: "/login"},
	})
	switch {
	case err != nil:
		log.Printf("ruled unreachable, letting the request through: %v", err)
	case !ans.Allowed:
		fmt.Printf("denied, retry in %v\n", ans.RetryAfter)
	default:
		fmt.Println("allowed")
	}
}

func ExampleMiddleware() {
	c := client.New("http://127.0.0.1:8080")
	limit := client.Middleware(c, client.MiddlewareOptions{
		User: func(r *http.Request) string { return r.Header.Get("X-User") },
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", limit(mux)))
}

func ExampleWithLeases() {
	// Rules with lease: N are decided in-process from leased permits; the
	// others are asked of ruled per request, as without leases.
	c := client.New("http://127.0.0.1:8080", client.WithLeases(client.LeaseOptions{MaxPermits: 500}))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil { // return what was not used
			log.Printf("returning leased permits: %v", err)
		}
	}()
	ans, err := c.Check(context.Background(), client.CheckRequest{Request: client.Request{IP: "203.0.113.7", Path: "/search"}})
	if err == nil && ans.Allowed {
		fmt.Println("allowed; decided in-process:", ans.Leased)
	}
}
