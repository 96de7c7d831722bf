package wasm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles the Go plugin package in pkgDir (a main package that calls
// guest.Register from an init function) into a Wasm module at out:
//
//	cd pkgDir && GOOS=wasip1 GOARCH=wasm CGO_ENABLED=0 go build -buildmode=c-shared -trimpath -o out .
//
// It needs the Go toolchain (1.24 or later) on PATH; the go command's output
// is part of the error.
func Build(ctx context.Context, pkgDir, out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("wasm: building a plugin needs the Go toolchain (1.24 or later) on PATH: %w", err)
	}
	absOut, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("wasm: output path: %w", err)
	}
	cmd := exec.CommandContext(ctx, goBin, "build", "-buildmode=c-shared", "-trimpath", "-o", absOut, ".")
	cmd.Dir = pkgDir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("wasm: go build in %s: %w\n%s", pkgDir, err, strings.TrimSpace(output.String()))
	}
	return nil
}
