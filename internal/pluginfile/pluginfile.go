// Package pluginfile reads the files that rule files declare as plugins
// (Wasm modules and plugin executables) within bounds: only regular files,
// at most a size cap, through a limited reader. A declaration of
// /dev/zero, a FIFO or a directory fails at once with the reason, instead
// of reading without end or blocking.
package pluginfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// Size caps. Both are far above what plugins need (a Go Wasm reactor is a
// few MiB, a Go plugin executable a few tens) and far below what would
// hurt the daemon to read or hash.
const (
	// MaxWasm is the largest Wasm module ruled reads: 64 MiB. A module is
	// read into memory whole, to be checked against its pin and compiled.
	MaxWasm int64 = 64 << 20
	// MaxExecutable is the largest plugin executable ruled hashes and
	// starts: 256 MiB. It is hashed as it is read, never held in memory.
	MaxExecutable int64 = 256 << 20
)

// ErrTooLarge is the error of a file larger than its cap.
var ErrTooLarge = errors.New("larger than the cap")

// ErrNotRegular is the error of a path that is not a regular file (nor a
// symbolic link to one).
var ErrNotRegular = errors.New("not a regular file")

// Read returns the content of the regular file at path, which may have at
// most max bytes.
func Read(path string, max int64) ([]byte, error) {
	f, size, err := open(path, max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	b.Grow(int(size) + bytes.MinRead) // one read past the end finds EOF
	if err := copyAtMost(&b, f, path, max); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Digest returns the hex SHA-256 digest of the regular file at path, which
// may have at most max bytes, computed as the file is read.
func Digest(path string, max int64) (string, error) {
	f, _, err := open(path, max)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if err := copyAtMost(h, f, path, max); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Stat returns the file information of path when it is a regular file (or
// a symbolic link to one) of at most max bytes, and else why it is not.
func Stat(path string, max int64) (fs.FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	return fi, check(path, fi, max)
}

// CheckPin reports a file whose SHA-256 digest (hex) is not the one its
// declaration pins; nil when pin is empty or matches.
func CheckPin(path, pin, digest string) error {
	if pin == "" || pin == digest {
		return nil
	}
	return fmt.Errorf("%s: sha256 mismatch: the rule file pins %s but the file's digest is %s; refusing to load it", path, pin, digest)
}

// open opens path if it is a regular file of at most max bytes, and
// returns it with its size. The checks are made on the path first, so that
// a device is not even opened, and again on the opened file, which is the
// one read. O_NONBLOCK keeps the open of a FIFO swapped in between from
// blocking.
func open(path string, max int64) (*os.File, int64, error) {
	if _, err := Stat(path, max); err != nil {
		return nil, 0, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = check(path, fi, max)
	}
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, fi.Size(), nil
}

func check(path string, fi fs.FileInfo, max int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %w (it is %s): a plugin must be a regular file", path, ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > max {
		return tooLarge(path, fmt.Sprintf("%d bytes", fi.Size()), max)
	}
	return nil
}

func tooLarge(path, size string, max int64) error {
	return fmt.Errorf("%s: %w: it has %s, a plugin file may have at most %d MiB", path, ErrTooLarge, size, max>>20)
}

// copyAtMost copies the file's content to w, failing once it passes max
// bytes (the file grew since it was checked).
func copyAtMost(w io.Writer, f *os.File, path string, max int64) error {
	n, err := io.Copy(w, io.LimitReader(f, max+1))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if n > max {
		return tooLarge(path, "more bytes", max)
	}
	return nil
}

// kind names a file mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}
