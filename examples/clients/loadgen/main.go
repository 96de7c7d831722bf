// Command loadgen asks ruled for decisions as fast as it can, through the
// Go client, with or without client leases, and prints one JSON line:
//
//	{"decisions": N, "allowed": N, "denied": N, "per_second": N, "errors": N}
//
// errors counts the checks that failed (no decision; the first one's error
// goes to stderr).
//
// Usage:
//
//	loadgen --url http://127.0.0.1:8080 \
//	  --rule-request '{"request": {"ip": "203.0.113.7", "path": "/search"}, "attrs": {"tenant": "acme"}}' \
//	  --goroutines 8 --duration 10s --lease on
//
// With --lease on it returns the permits it leased and did not use before it
// exits, so that a run leaves ruled's counts exact.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ruled-dev/ruled/client"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errUsage marks command-line errors (exit status 2).
var errUsage = errors.New("usage")

// config is the command line.
type config struct {
	url        string
	req        client.CheckRequest
	goroutines int
	duration   time.Duration
	lease      bool
	maxPermits int64
}

// ruleRequest is the --rule-request body: the request and attrs of a check.
type ruleRequest struct {
	Request client.Request    `json:"request"`
	Attrs   map[string]string `json:"attrs"`
}

func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{}
	var body, lease string
	fs.StringVar(&c.url, "url", "http://127.0.0.1:8080", "ruled's HTTP API")
	fs.StringVar(&body, "rule-request", `{"request": {"ip": "203.0.113.7"}}`, "the JSON check body's request and attrs")
	fs.IntVar(&c.goroutines, "goroutines", 8, "goroutines deciding at once")
	fs.DurationVar(&c.duration, "duration", 10*time.Second, "how long to run")
	fs.StringVar(&lease, "lease", "on", "client leases: on or off")
	fs.Int64Var(&c.maxPermits, "max-permits", client.DefaultLeasePermits, "most permits one lease asks for (the rule's lease: N bounds it too)")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	var rr ruleRequest
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rr); err != nil {
		return nil, fmt.Errorf("%w: --rule-request: %v", errUsage, err)
	}
	c.req = client.CheckRequest{Request: rr.Request, Attrs: rr.Attrs}
	switch lease {
	case "on":
		c.lease = true
	case "off":
	default:
		return nil, fmt.Errorf("%w: --lease: want on or off, got %q", errUsage, lease)
	}
	if c.goroutines < 1 || c.duration <= 0 || c.maxPermits < 1 {
		return nil, fmt.Errorf("%w: --goroutines, --duration and --max-permits must be above 0", errUsage)
	}
	return c, nil
}

// report is the JSON line printed at the end.
type report struct {
	Decisions int64 `json:"decisions"`
	Allowed   int64 `json:"allowed"`
	Denied    int64 `json:"denied"`
	PerSecond int64 `json:"per_second"`
	Errors    int64 `json:"errors"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parse(args, stderr)
	if err != nil {
		return err
	}
	var opts []client.Option
	if c.lease {
		opts = append(opts, client.WithLeases(client.LeaseOptions{MaxPermits: c.maxPermits}))
	}
	rc := client.New(c.url, opts...)
	// One check first: a wrong URL or body fails here, not as a run of
	// errors.
	first, err := rc.Check(ctx, c.req)
	if err != nil {
		return err
	}
	var allowed, denied, failed atomic.Int64
	if first.Allowed {
		allowed.Add(1)
	} else {
		denied.Add(1)
	}
	var firstErr error // the first check that failed, for the report
	var errOnce sync.Once
	runCtx, cancel := context.WithTimeout(ctx, c.duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range c.goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var a, d, f int64 // counted locally: shared counters would cost more than a leased decision
			for runCtx.Err() == nil {
				ans, err := rc.Check(runCtx, c.req)
				switch {
				case err != nil:
					if runCtx.Err() == nil {
						f++
						errOnce.Do(func() { firstErr = err }) // errors differ in type: no atomic.Value
					}
				case ans.Allowed:
					a++
				default:
					d++
				}
			}
			allowed.Add(a)
			denied.Add(d)
			failed.Add(f)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	closeCtx, cancelClose := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelClose()
	if err := rc.Close(closeCtx); err != nil {
		fmt.Fprintln(stderr, "loadgen: returning unused permits:", err)
	}
	r := report{Allowed: allowed.Load(), Denied: denied.Load(), Errors: failed.Load()}
	r.Decisions = r.Allowed + r.Denied
	r.PerSecond = int64(float64(r.Decisions) / elapsed.Seconds())
	if firstErr != nil {
		fmt.Fprintf(stderr, "loadgen: %d checks failed; the first: %v\n", r.Errors, firstErr)
	}
	return json.NewEncoder(stdout).Encode(r)
}
