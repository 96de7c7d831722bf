package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/ruled-dev/ruled/host"
	"github.com/ruled-dev/ruled/host/process"
	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/internal/pluginfile"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// pluginLoader returns the loader the engine uses for the third-party
// plugins rule files declare: Wasm modules through host/wasm, executables
// through host/process. A sha256 pin is checked for both (host/process
// checks it itself, at load and again at every restart).
//
// Calls into a plugin get a deadline of at least four Redis time-outs, so
// that a slow Redis shows as a Redis error, never as a plugin that hangs.
// With pools, each Wasm module's instance pool is reported until the
// plugin is closed (nil: not reported).
func pluginLoader(log *slog.Logger, wopts wasm.Options, pools *wasmPools) host.PluginLoader {
	return func(ctx context.Context, d rules.PluginDecl) (sdk.Algorithm, error) {
		switch {
		case d.Process != "":
			return process.Load(ctx, d.Process, process.Options{SHA256: d.SHA256, CallTimeout: wopts.CallTimeout, Logger: log})
		case d.Wasm != "":
			// Read once: the bytes checked against the pin are the bytes loaded.
			bin, err := readPinned(d.Wasm, d.SHA256)
			if err != nil {
				return nil, err
			}
			w, err := pools.load(func() (*wasm.Plugin, error) { return wasm.LoadBytes(ctx, d.Wasm, bin, wopts) })
			if err != nil || pools == nil {
				return w, err
			}
			pools.add(d.Name, w)
			return &pooledWasm{Plugin: w, name: d.Name, pools: pools}, nil
		}
		return nil, errors.New("declares neither wasm nor process")
	}
}

// pluginCallTimeout is the deadline of one call into a plugin: at least
// four Redis time-outs, so that a slow Redis shows as a Redis error, never as
// a plugin that hangs (and never kills a Wasm instance in a Redis call).
func pluginCallTimeout(redisTimeout time.Duration) time.Duration {
	return max(process.DefaultCallTimeout, 4*redisTimeout)
}

// wasmOptions are the options of every Wasm module the daemon loads, third
// party or built-in (--builtins=wasm): the daemon's logger, the plugin call
// deadline, and with a --data-dir one compilation cache there, shared by
// every module, so that a restart does not compile the modules again. The
// returned func closes the cache.
func wasmOptions(log *slog.Logger, callTimeout time.Duration, dataDir string) (wasm.Options, func()) {
	opts := wasm.Options{CallTimeout: callTimeout, Logger: log}
	if dataDir == "" {
		return opts, func() {}
	}
	cache, err := wazero.NewCompilationCacheWithDir(filepath.Join(dataDir, "wasm-cache"))
	if err != nil {
		log.Warn("Wasm modules are compiled at every start: no compilation cache", "err", err)
		return opts, func() {}
	}
	opts.Cache = cache
	return opts, func() { _ = cache.Close(context.Background()) }
}

// readPinned reads the Wasm module at path (a regular file of at most
// pluginfile.MaxWasm bytes) and, when want is set, compares its SHA-256
// digest with want (lower-case hex).
func readPinned(path, want string) ([]byte, error) {
	bin, err := pluginfile.Read(path, pluginfile.MaxWasm)
	if err != nil {
		return nil, err
	}
	if want == "" {
		return bin, nil
	}
	sum := sha256.Sum256(bin)
	if err := pluginfile.CheckPin(path, want, hex.EncodeToString(sum[:])); err != nil {
		return nil, err
	}
	return bin, nil
}

// prevalidateRules checks the rule files before anything starts, against
// the built-in plugins. Files that declare third-party plugins are checked
// only as far as parsing goes: the engine's Load checks the rest once it has
// loaded their plugins.
func prevalidateRules(path string) error {
	files, err := rules.Parse(path)
	if files != nil && len(files.Plugins()) > 0 {
		return err // parse errors only
	}
	_, err = rulesLoad(path)
	return err
}
