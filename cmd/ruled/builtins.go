package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// The ways --builtins runs the built-in plugins.
const (
	builtinsNative = "native" // linked into ruled
	builtinsWasm   = "wasm"   // each through the Wasm driver, from --plugins-dir
)

// checkBuiltinsFlag validates --builtins.
func checkBuiltinsFlag(mode string) error {
	if mode != builtinsNative && mode != builtinsWasm {
		return fmt.Errorf("--builtins %q: want native or wasm", mode)
	}
	return nil
}

// builtinPlugins returns the built-in algorithms as --builtins asks, and a
// function that stops them once nothing uses them any more.
//
// With wasm, each built-in NAME decides through the module dir/NAME.wasm
// (what `make plugins` writes), loaded when a rule first configures it:
// compiling a module takes seconds, so only the built-ins the rules use
// are compiled, at start for the first rule set (see preloadBuiltins) and
// at reload for later ones. A missing module, or one that differs from the
// built-in linked into this ruled, is an error of every rule that uses it:
// ruled does not start with it, and a reload that needs it keeps the rules
// serving. Modules load one at a time. With pools, each loaded module's
// instance pool is reported until it is closed (nil: not reported).
func builtinPlugins(mode, dir string, opts wasm.Options, pools *wasmPools) ([]sdk.Algorithm, func(), error) {
	natives := builtin.All()
	if mode != builtinsWasm {
		return natives, func() {}, nil
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, nil, fmt.Errorf("--builtins=wasm: --plugins-dir %s is not a directory: build the modules with `make plugins` (into bin/plugins) or point --plugins-dir at them", dir)
	}
	out := make([]sdk.Algorithm, len(natives))
	mods := make([]*wasmBuiltin, len(natives))
	loading := &sync.Mutex{}
	for i, n := range natives {
		mods[i] = &wasmBuiltin{native: n, path: filepath.Join(dir, n.Info().Name+".wasm"), opts: opts, mu: loading, pools: pools}
		out[i] = mods[i]
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, m := range mods {
			if err := m.close(ctx); err != nil {
				opts.Logger.Warn("closing a built-in's Wasm module", "plugin", m.native.Info().Name, "err", err)
			}
		}
	}
	return out, stop, nil
}

// preloadBuiltins loads the Wasm modules of the built-ins that set's rules
// use, if they run as Wasm. Rules with static configs have loaded theirs in
// Configure already; this covers rules whose config is all dynamic (the
// plugin configures it on first use), so that ruled does not start without
// their module nor compile it while a request waits. (A reload that brings
// such a rule for a built-in no rule used before loads its module on the
// first request.)
func preloadBuiltins(set *rules.Set) error {
	for _, r := range set.Rules() {
		if b, ok := r.Algorithm().(*wasmBuiltin); ok {
			if _, err := b.module(); err != nil {
				return fmt.Errorf("rule %q: %w", r.Name, err)
			}
		}
	}
	return nil
}

// wasmBuiltin is a built-in plugin that decides through its Wasm module.
// Its Info is the native plugin's, which the module must match. It
// configures the native plugin too, only so that on_error: local keeps its
// in-process limiter (which never touches Redis) as it has natively.
type wasmBuiltin struct {
	native sdk.Algorithm
	path   string
	opts   wasm.Options

	mu    *sync.Mutex // shared by the built-ins: one module loads at a time
	w     atomic.Pointer[wasm.Plugin]
	pools *wasmPools // reports w's instance pool; nil when none does
}

// builtinConfig is a rule's config parsed by both plugins.
type builtinConfig struct {
	w, native sdk.Config
}

// module returns the loaded module, loading it on first use. A failed load
// is not remembered: the next rule load tries again (after a rebuild, say).
func (b *wasmBuiltin) module() (*wasm.Plugin, error) {
	if w := b.w.Load(); w != nil {
		return w, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w := b.w.Load(); w != nil {
		return w, nil
	}
	name := b.native.Info().Name
	if _, err := os.Stat(b.path); err != nil {
		return nil, fmt.Errorf("the built-in %s runs as Wasm (--builtins=wasm) but %s is missing: build it with `make plugins` or point --plugins-dir at it", name, b.path)
	}
	start := time.Now()
	ctx := context.Background() // instantiation has its own deadline
	w, err := b.pools.load(func() (*wasm.Plugin, error) { return wasm.Load(ctx, b.path, b.opts) })
	if err != nil {
		return nil, fmt.Errorf("the built-in %s runs as Wasm (--builtins=wasm): %w", name, err)
	}
	if got, want := w.Info(), b.native.Info(); !reflect.DeepEqual(got, want) {
		_ = w.Close(ctx)
		return nil, fmt.Errorf("the built-in %s runs as Wasm (--builtins=wasm) but %s is not the %s linked into this ruled (version %s, scripts differ or an older build): rebuild it with `make plugins`",
			name, b.path, name, got.Version)
	}
	b.opts.Logger.Info("built-in loaded as Wasm", "plugin", name, "path", b.path, "took", time.Since(start).Round(time.Millisecond))
	b.w.Store(w)
	if b.pools != nil {
		b.pools.add(name, w)
	}
	return w, nil
}

// close closes the module if it was loaded.
func (b *wasmBuiltin) close(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.w.Swap(nil)
	if w == nil {
		return nil
	}
	if b.pools != nil {
		b.pools.remove(b.native.Info().Name, w)
	}
	return w.Close(ctx)
}

// Info implements sdk.Algorithm with the native plugin's Info, which the
// module's matches.
func (b *wasmBuiltin) Info() sdk.Info { return b.native.Info() }

// Configure implements sdk.Algorithm: the module validates raw, and the
// native plugin parses it for its local limiter.
func (b *wasmBuiltin) Configure(raw map[string]any) (sdk.Config, error) {
	w, err := b.module()
	if err != nil {
		return nil, err
	}
	wc, err := w.Configure(raw)
	if err != nil {
		return nil, err
	}
	nc, err := b.native.Configure(raw)
	if err != nil {
		return nil, fmt.Errorf("the native %s refuses a config its Wasm module accepts: %w", b.native.Info().Name, err)
	}
	return builtinConfig{w: wc, native: nc}, nil
}

// Decide implements sdk.Algorithm through the module.
func (b *wasmBuiltin) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	bc, ok := c.(builtinConfig)
	w := b.w.Load()
	if !ok || w == nil {
		return sdk.Decision{}, fmt.Errorf("wasm built-in %s: config of type %T, or the module is closed", b.native.Info().Name, c)
	}
	return w.Decide(ctx, h, bc.w, r)
}

// NewLocal implements sdk.LocalAlgorithm with the native plugin's limiter.
func (b *wasmBuiltin) NewLocal(c sdk.Config, share float64) (sdk.LocalLimiter, error) {
	bc, ok := c.(builtinConfig)
	la, local := b.native.(sdk.LocalAlgorithm)
	if !ok || !local {
		return nil, errors.New("wasm built-in " + b.native.Info().Name + ": no local limiter")
	}
	return la.NewLocal(bc.native, share)
}

var (
	_ sdk.Algorithm      = (*wasmBuiltin)(nil)
	_ sdk.LocalAlgorithm = (*wasmBuiltin)(nil)
)
