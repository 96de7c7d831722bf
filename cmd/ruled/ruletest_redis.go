package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/host/store"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/internal/offline/ruletest"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

// redisBackend decides on real Redis: one engine per case, whose scripts
// read the case's clock, under a key prefix of its own
// (ruled-test:<run>:<case>). Keys do not expire (capability HoldKeys: Redis
// would expire them on its own clock, which a case's clock leaves behind);
// close deletes every key of the run.
type redisBackend struct {
	st        *store.Store
	log       *slog.Logger
	run       string // ruled-test:<random>, this run's prefix
	cases     int    // cases started, for their prefixes
	wopts     wasm.Options
	closeWasm func()
}

func newRedisBackend(ctx context.Context, url string, log *slog.Logger) (*redisBackend, error) {
	st, err := store.Open(ctx, store.Options{URL: url, Timeout: capability.DefaultTimeout, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("--redis: %w", err)
	}
	if err := st.Client().Ping(ctx).Err(); err != nil {
		st.Close()
		return nil, fmt.Errorf("--redis: %s: %w", st.Describe(), err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	// One Wasm runtime configuration for the run: its compilation cache
	// compiles a module once for every case.
	wopts, _ := wasmOptions(log, pluginCallTimeout(capability.DefaultTimeout), "")
	cache := wazero.NewCompilationCache()
	wopts.Cache = cache
	closeWasm := func() { _ = cache.Close(context.Background()) }
	return &redisBackend{st: st, log: log, run: "ruled-test:" + hex.EncodeToString(b[:]), wopts: wopts, closeWasm: closeWasm}, nil
}

// close deletes the run's keys and closes the connections.
func (b *redisBackend) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := capability.New(b.st.Client(), capability.Options{Prefix: b.run, Logger: b.log})
	if _, err := c.ClearAll(ctx); err != nil {
		b.log.Warn("ruled test: keys of the run not deleted: delete them with SCAN and UNLINK", "pattern", b.run+":*", "err", err)
	}
	b.closeWasm()
	b.st.Close()
}

func (b *redisBackend) load(ctx context.Context, path string) (testRules, error) {
	set, _, err := checkRules(ctx, path, b.log, false)
	if err != nil {
		return nil, err
	}
	return &redisRules{b: b, path: path, s: set}, nil
}

type redisRules struct {
	b    *redisBackend
	path string
	s    *rules.Set
}

func (r *redisRules) set() *rules.Set { return r.s }

func (r *redisRules) run(ctx context.Context, c *ruletest.Case) (ruletest.Outcome, error) {
	r.b.cases++
	clock := &engineClock{ctx: ctx}
	cap := capability.New(r.b.st.Client(), capability.Options{Timeout: capability.DefaultTimeout,
		Prefix: fmt.Sprintf("%s:%d", r.b.run, r.b.cases), Logger: r.b.log, Clock: clock.now.Load, HoldKeys: true})
	e, err := host.NewEngine(host.Options{Capability: cap, Plugins: builtin.All(), Logger: r.b.log, NoShortcuts: true,
		LoadPlugin: pluginLoader(r.b.log, r.b.wopts, nil), Now: func() time.Time { return time.UnixMicro(clock.now.Load()) }})
	if err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	defer e.Close(context.WithoutCancel(ctx))
	if _, err := e.Load(ctx, r.path); err != nil {
		return ruletest.Outcome{Case: c}, err
	}
	clock.e = e
	return c.Run(ctx, clock), nil
}

// engineClock is a ruletest.FailingChecker over an engine whose scripts
// read the time it sets.
type engineClock struct {
	ctx context.Context
	e   *host.Engine
	now atomic.Int64
	err error // why a decision failed: Redis, or the run was stopped
}

// Check implements ruletest.Checker.
func (c *engineClock) Check(nowUS int64, req *host.CheckRequest) host.Result {
	c.now.Store(nowUS)
	res := c.e.Check(c.ctx, req)
	if c.err != nil {
		return res
	}
	if err := c.ctx.Err(); err != nil {
		c.err = err
		return res
	}
	for _, rr := range res.Results {
		// A rule whose expressions fail degrades too, as on the models;
		// only a capability error is Redis failing.
		var ce *capability.Error
		if rr.Degraded != host.DegradedNone && errors.As(rr.Err, &ce) {
			c.err = fmt.Errorf("rule %s: Redis failed, so the case cannot go on: %w", rr.Rule, rr.Err)
			break
		}
	}
	return res
}

// Err implements ruletest.FailingChecker.
func (c *engineClock) Err() error { return c.err }

var _ ruletest.FailingChecker = (*engineClock)(nil)
