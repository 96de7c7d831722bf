// Package client is a Go client for ruled's HTTP API (docs/http.md) and a
// net/http middleware that limits an application's handlers through ruled.
//
// It depends on the standard library only: its request and answer types
// mirror the API's JSON and share no code with the daemon.
//
//	c := client.New("http://127.0.0.1:8080")
//	ans, err := c.Check(ctx, client.CheckRequest{Request: client.Request{IP: ip, Path: "/login"}})
//	switch {
//	case err != nil: // ruled unreachable (*UnreachableError) or refused the request (*Error)
//	case !ans.Allowed: // denied; ans.RetryAfter says for how long
//	}
//
// With WithLeases the client decides in-process where the rules allow it
// (rules with lease: N), from permits it leases from ruled: millions of
// decisions a second per process instead of one HTTP round trip each.
//
//	c := client.New("http://127.0.0.1:8080", client.WithLeases(client.LeaseOptions{}))
//	defer c.Close(ctx) // gives back the permits it did not use
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultTimeout bounds one call when no WithTimeout option is given.
const DefaultTimeout = time.Second

// DefaultMaxIdleConnsPerHost is how many idle keep-alive connections to
// ruled the default transport keeps (net/http's own default is 2, which
// makes a busy client open and close connections all the time).
const DefaultMaxIdleConnsPerHost = 64

// maxAnswerBytes bounds an answer body (a batch of 1000 checks fits).
const maxAnswerBytes = 32 << 20

// Client calls one ruled server. It is safe for concurrent use and keeps
// connections alive between calls.
type Client struct {
	base    string // without a trailing slash
	baseErr error
	hc      *http.Client
	timeout time.Duration
	leases  *leaser // WithLeases
}

// Option configures a Client.
type Option func(*Client)

// WithTimeout sets the time-out of each call (default DefaultTimeout); 0
// means none beyond the context's. Acquire adds the wait to it. A context
// deadline that comes first ends a call earlier.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = max(d, 0) } }

// WithHTTPClient makes the client send its calls through hc instead of its
// own keep-alive transport. hc's own Timeout, if any, applies too.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// New returns a client for the ruled server at baseURL, such as
// "http://127.0.0.1:8080". A base URL that does not parse as http or https
// makes every call fail with that error.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{base: strings.TrimRight(baseURL, "/"), timeout: DefaultTimeout}
	if u, err := url.Parse(c.base); err != nil {
		c.baseErr = fmt.Errorf("ruled client: base URL %q: %w", baseURL, err)
	} else if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.baseErr = fmt.Errorf("ruled client: base URL %q: want http://host:port or https://host:port", baseURL)
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: newTransport()}
	}
	return c
}

// newTransport is net/http's default transport with more idle connections
// kept per host.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4 * DefaultMaxIdleConnsPerHost
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	t.IdleConnTimeout = 90 * time.Second
	return t
}

// Close gives back the unused permits of the client's leases (WithLeases)
// and stops leasing: later checks ask ruled one by one. Without leases it
// does nothing. The client stays usable.
func (c *Client) Close(ctx context.Context) error {
	if c.leases == nil {
		return nil
	}
	return c.leases.close(ctx)
}

// WithTimeout returns a copy of c whose calls time out after d instead. It
// shares c's connections.
func (c *Client) WithTimeout(d time.Duration) *Client {
	cp := *c
	cp.timeout = max(d, 0)
	return &cp
}

// Check asks whether a request may go ahead (POST /v1/check). A denial is
// an Answer with Allowed false, not an error; so is a fail-closed decision
// (FailClosed true). Errors are *Error (ruled refused the request or
// answered something else) or *UnreachableError.
//
// With WithLeases, a request that takes hits is decided from a lease where
// ruled's rules allow it (Answer.Leased says so).
func (c *Client) Check(ctx context.Context, req CheckRequest) (*Answer, error) {
	if c.leases != nil && req.leaseable() {
		if a, ok, err := c.leases.check(ctx, &req); ok || err != nil {
			return a, err
		}
	}
	return c.decide(ctx, "check", "/v1/check", req.body(), 0)
}

// Acquire is Check that waits up to wait for permission (POST
// /v1/acquire): ruled retries a denied request after its retry-after while
// that fits in the wait, and answers an admitted request with a shaping
// delay once the delay has passed. With a LeaseID, a request an in-flight
// limit denies waits in its line, first come, first served. The answer is
// the last decision; the call's time-out is the client's plus wait.
func (c *Client) Acquire(ctx context.Context, req CheckRequest, wait time.Duration) (*Answer, error) {
	b := req.body()
	timeoutMS := max(wait, 0).Milliseconds()
	b.TimeoutMS = &timeoutMS
	return c.decide(ctx, "acquire", "/v1/acquire", b, max(wait, 0))
}

// Release frees the in-flight slots that req.LeaseID holds (POST
// /v1/release), once its request has ended: req is the request and attrs
// of the check that acquired them (Hits is not sent). Only rules whose
// plugins hold slots (the concurrency limiter) are asked, so a release
// gives back nothing a rate limit counted. It returns the number of slots
// freed: 0 when they were freed before or their leases expired. Under
// ruled's --client-refunds=admin or deny, releases are refused (an *Error
// with Code refunds_refused) and the slots come back when their leases
// expire.
func (c *Client) Release(ctx context.Context, req CheckRequest) (int64, error) {
	b := req.body()
	b.Hits = nil
	var out struct {
		Released int64 `json:"released"`
	}
	if _, err := c.call(ctx, "release", "/v1/release", b, &out); err != nil {
		return 0, err
	}
	return out.Released, nil
}

// Renew keeps the in-flight slots of a request that runs longer than their
// leases last (POST /v1/renew): each slot req.LeaseID holds is acquired
// again, its lease starting anew, and one whose lease expired is taken
// again if one is free. Only the rules that hold slots are asked. The
// answer is a check's: Allowed false when a slot could not be kept.
func (c *Client) Renew(ctx context.Context, req CheckRequest) (*Answer, error) {
	b := req.body()
	b.Hits = nil
	return c.decide(ctx, "renew", "/v1/renew", b, 0)
}

// Batch asks many independent questions in one call (POST
// /v1/check/batch) and returns the answers in order. Bad input in any
// check fails the whole batch with an *Error that names it.
func (c *Client) Batch(ctx context.Context, reqs []CheckRequest) ([]*Answer, error) {
	body := struct {
		Checks []checkBody `json:"checks"`
	}{Checks: make([]checkBody, len(reqs))}
	for i := range reqs {
		body.Checks[i] = reqs[i].body()
	}
	var out struct {
		Results []wireAnswer `json:"results"`
	}
	if _, err := c.call(ctx, "batch", "/v1/check/batch", body, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(reqs) {
		return nil, &Error{StatusCode: http.StatusOK, Code: CodeInvalidAnswer, Message: fmt.Sprintf("%d answers for %d checks", len(out.Results), len(reqs))}
	}
	answers := make([]*Answer, len(out.Results))
	for i := range out.Results {
		a, ok := out.Results[i].answer()
		if !ok {
			return nil, &Error{StatusCode: http.StatusOK, Code: CodeInvalidAnswer, Message: fmt.Sprintf("results[%d] is not a check answer", i)}
		}
		answers[i] = a
	}
	return answers, nil
}

// call posts body to path and decodes a 200 answer's JSON into out; any
// other status is an *Error. It returns the answer's header.
func (c *Client) call(ctx context.Context, op, path string, body, out any) (http.Header, error) {
	resp, cancel, err := c.post(ctx, op, path, body, 0)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer drain(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, errorOf(resp)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(out); err != nil {
		return nil, c.readError(op, resp, err)
	}
	return resp.Header, nil
}

// decide posts a check or an acquire and reads the decision: 200, 429, or
// 503 with a check answer's body.
func (c *Client) decide(ctx context.Context, op, path string, body checkBody, extra time.Duration) (*Answer, error) {
	resp, cancel, err := c.post(ctx, op, path, body, extra)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable:
	default:
		return nil, errorOf(resp)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return nil, c.readError(op, resp, err)
	}
	var w wireAnswer
	a, ok := (*Answer)(nil), false
	if json.Unmarshal(data, &w) == nil {
		a, ok = w.answer()
	}
	if !ok {
		if resp.StatusCode == http.StatusServiceUnavailable { // not ruled's decision: a proxy's or a stopping server's
			return nil, &Error{StatusCode: resp.StatusCode, Message: snippet(data)}
		}
		return nil, &Error{StatusCode: resp.StatusCode, Code: CodeInvalidAnswer, Message: "not a check answer: " + snippet(data)}
	}
	a.StatusCode = resp.StatusCode
	a.FailClosed = resp.StatusCode == http.StatusServiceUnavailable
	a.Header = http.Header{}
	for _, h := range rateLimitHeaders {
		if v := resp.Header.Values(h); len(v) > 0 {
			a.Header[http.CanonicalHeaderKey(h)] = v
		}
	}
	return a, nil
}

// post sends a JSON body. On success the caller must close the body and
// call cancel.
func (c *Client) post(ctx context.Context, op, path string, body any, extra time.Duration) (*http.Response, context.CancelFunc, error) {
	if c.baseErr != nil {
		return nil, nil, c.baseErr
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, nil, fmt.Errorf("ruled %s: encoding the request: %w", op, err)
	}
	cancel := context.CancelFunc(func() {})
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, c.timeout+extra)
	}
	u := c.base + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(data))
	if err != nil {
		cancel()
		return nil, nil, fmt.Errorf("ruled %s: %w", op, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		return nil, nil, &UnreachableError{Op: op, URL: u, Err: unwrapURLError(err)}
	}
	return resp, cancel, nil
}

// readError is a failure while reading an answer's body: a broken
// connection or time-out is UnreachableError, anything else a bad answer.
func (c *Client) readError(op string, resp *http.Response, err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if errors.As(err, &syntax) || errors.As(err, &typ) {
		return &Error{StatusCode: resp.StatusCode, Code: CodeInvalidAnswer, Message: err.Error()}
	}
	return &UnreachableError{Op: op, URL: resp.Request.URL.String(), Err: err}
}

// errorOf turns a non-decision answer into an *Error, with ruled's code
// and message when the body is ruled's error body.
func errorOf(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb errorBody
	if json.Unmarshal(data, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		return &Error{StatusCode: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	return &Error{StatusCode: resp.StatusCode, Message: snippet(data)}
}

// snippet is the start of a body, for an error message.
func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

// unwrapURLError drops net/http's *url.Error wrapper, whose message
// repeats the method and URL that UnreachableError already names.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// drain reads what is left of a body (a little) and closes it, so that the
// connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}
