package main

import (
	"context"
	"slices"
	"sync"

	"github.com/ruled-dev/ruled/host/wasm"
)

// wasmPools reports the instance pools of the Wasm modules the daemon has
// loaded, third-party plugins and --builtins=wasm alike, as
// ruled_plugin_pool_instances (host/metrics' RegisterPool), under the
// plugin's name. A reload that loads a plugin's module again (its file
// changed) loads the new one before it closes the old one: the newest
// live module of a name is the one reported, and closing a module that is
// not reported leaves the metric alone.
type wasmPools struct {
	register func(plugin string, stats func() (idle, busy int)) // RegisterPool
	heap     *staticHeap                                        // counts each module's static heap once; nil: no one does

	mu   sync.Mutex
	live map[string][]*wasm.Plugin // by name, oldest first
}

// newWasmPools returns a wasmPools that registers with register.
func newWasmPools(register func(plugin string, stats func() (idle, busy int))) *wasmPools {
	return &wasmPools{register: register, live: map[string][]*wasm.Plugin{}}
}

// load runs load, which loads a Wasm module, measuring its static heap
// when p has a staticHeap. p may be nil.
func (p *wasmPools) load(load func() (*wasm.Plugin, error)) (*wasm.Plugin, error) {
	if p == nil || p.heap == nil {
		return load()
	}
	return measureLoad(p.heap, load)
}

// add reports w as the pool of the plugin name.
func (p *wasmPools) add(name string, w *wasm.Plugin) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[name] = append(p.live[name], w)
	p.register(name, poolStats(w))
}

// remove stops reporting w, before it is closed: the plugin name's pool is
// then its newest other live module's, or none.
func (p *wasmPools) remove(name string, w *wasm.Plugin) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.heap != nil {
		p.heap.forget(w)
	}
	ws := p.live[name]
	i := slices.Index(ws, w)
	if i < 0 {
		return
	}
	ws = slices.Delete(ws, i, i+1)
	if len(ws) == 0 {
		delete(p.live, name)
		p.register(name, nil)
		return
	}
	p.live[name] = ws
	p.register(name, poolStats(ws[len(ws)-1]))
}

// poolStats is RegisterPool's function for w: idle instances, and the
// others, which are running a call.
func poolStats(w *wasm.Plugin) func() (idle, busy int) {
	return func() (idle, busy int) {
		s := w.Stats()
		return s.Idle, max(s.Instances-s.Idle, 0)
	}
}

// pooledWasm is a third-party Wasm plugin whose pool wasmPools reports
// until it is closed. Its other methods are the module's.
type pooledWasm struct {
	*wasm.Plugin
	name  string
	pools *wasmPools
}

// Close stops reporting the plugin's pool and closes the module.
func (p *pooledWasm) Close(ctx context.Context) error {
	p.pools.remove(p.name, p.Plugin)
	return p.Plugin.Close(ctx)
}
