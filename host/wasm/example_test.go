package wasm_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ruled-dev/ruled/host/wasm"
)

// Build a Go plugin package into a module, load it, and use it like any
// sdk.Algorithm: the engine registers its Info().Scripts with the Redis
// capability and calls Configure and Decide.
func Example() {
	ctx := context.Background()
	out := filepath.Join(os.TempDir(), "fixedwindow.wasm")
	if err := wasm.Build(ctx, "../../plugins/fixedwindow/wasm", out); err != nil {
		log.Fatal(err)
	}
	p, err := wasm.Load(ctx, out, wasm.Options{CacheDir: filepath.Join(os.TempDir(), "ruled-wasm-cache")})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close(ctx)
	fmt.Println(p.Info().Name, p.Info().Scripts[0].Name)
	if _, err := p.Configure(map[string]any{"limit": 0, "window": "1s"}); err != nil {
		fmt.Println(err)
	}
}

// Inspect reads a module's Info without compiling it to machine code, for
// `ruled plugin inspect`.
func ExampleInspect() {
	m, err := wasm.Inspect(context.Background(), "fixedwindow.wasm")
	if err != nil {
		log.Fatal(err)
	}
	info := m.Info
	for _, s := range info.Scripts {
		fmt.Println(info.Name, info.Version, s.Name, s.Commands)
	}
}
