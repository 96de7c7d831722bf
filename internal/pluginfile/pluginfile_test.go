//go:build unix

package pluginfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadAndDigest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.wasm")
	content := []byte("\x00asm module bytes")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := Read(path, MaxWasm)
	if err != nil || string(b) != string(content) {
		t.Fatalf("Read: %q, %v", b, err)
	}
	sum := sha256.Sum256(content)
	if d, err := Digest(path, MaxExecutable); err != nil || d != hex.EncodeToString(sum[:]) {
		t.Fatalf("Digest: %s, %v", d, err)
	}
	// Exactly the cap is allowed, one byte more is not.
	if _, err := Read(path, int64(len(content))); err != nil {
		t.Fatalf("a file of exactly the cap: %v", err)
	}
	if _, err := Digest(path, int64(len(content))-1); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a file one byte over the cap: %v", err)
	}
}

// TestRefusesWhatIsNotABoundedRegularFile: /dev/zero, a FIFO, a directory
// and a file over the cap fail at once, naming the reason, for both Read
// and Digest; none is read.
func TestRefusesWhatIsNotABoundedRegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.wasm")
	if err := os.WriteFile(big, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(big, MaxWasm+1); err != nil { // sparse: nothing written
		t.Fatal(err)
	}
	link := filepath.Join(dir, "zero.wasm")
	if err := os.Symlink("/dev/zero", link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		want error
		msg  string
	}{
		{"/dev/zero", ErrNotRegular, "it is a character device"},
		{link, ErrNotRegular, "it is a character device"},
		{fifo, ErrNotRegular, "it is a named pipe"},
		{dir, ErrNotRegular, "it is a directory"},
		{big, ErrTooLarge, "it has 67108865 bytes, a plugin file may have at most 64 MiB"},
	} {
		start := time.Now()
		_, rerr := Read(tc.path, MaxWasm)
		_, derr := Digest(tc.path, MaxWasm)
		for _, err := range []error{rerr, derr} {
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path+": ") || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s: %v, want %v and %q", tc.path, err, tc.want, tc.msg)
			}
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: refused after %v, want at once", tc.path, took)
		}
	}
}

// TestReadIsLimited: a file that grows past the cap after it was checked
// is read no further than the cap.
func TestReadIsLimited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grows")
	if err := os.WriteFile(path, []byte(strings.Repeat("x", 100)), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	if err := copyAtMost(&b, f, path, 10); !errors.Is(err, ErrTooLarge) || b.Len() > 11 {
		t.Fatalf("copyAtMost past the cap: %v, %d bytes read", err, b.Len())
	}
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	if err := copyAtMost(sha256.New(), f, path, 10); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("copyAtMost to a hash past the cap: %v", err)
	}
}
