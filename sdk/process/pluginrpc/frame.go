package pluginrpc

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"
)

// StepsFD is the file descriptor ruled gives a plugin's steps socket in
// the plugin's process (the first of exec.Cmd's ExtraFiles).
const StepsFD = 3

// frameHeader is the length prefix of a frame on the steps socket.
const frameHeader = 4

// AppendFrame appends m to b as one frame of the steps socket: its length
// as a 4-byte big-endian unsigned integer, then its bytes.
func AppendFrame(b []byte, m proto.Message) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return b[:start], fmt.Errorf("encoding a %T frame: %w", m, err)
	}
	n := len(b) - start - frameHeader
	if n > MaxMessage {
		return b[:start], fmt.Errorf("a %T frame of %d bytes is over the %d-byte bound", m, n, MaxMessage)
	}
	binary.BigEndian.PutUint32(b[start:], uint32(n))
	return b, nil
}

// ReadFrame reads one frame from r into m, using buf for its bytes when
// it is large enough, and returns the buffer for the next call. It returns
// io.EOF only when r ends between two frames.
func ReadFrame(r *bufio.Reader, buf []byte, m proto.Message) ([]byte, error) {
	var head [frameHeader]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return buf, err
	}
	n := binary.BigEndian.Uint32(head[:])
	if n > MaxMessage {
		return buf, fmt.Errorf("a frame of %d bytes is over the %d-byte bound", n, MaxMessage)
	}
	if int(n) > cap(buf) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, fmt.Errorf("reading a frame of %d bytes: %w", n, io.ErrUnexpectedEOF)
	}
	if err := proto.Unmarshal(buf, m); err != nil {
		return buf, fmt.Errorf("decoding a %T frame: %w", m, err)
	}
	return buf, nil
}

// FrameBuffered reports whether r holds a whole frame already, so that a
// reader answering frames in turn may read on before it flushes.
func FrameBuffered(r *bufio.Reader) bool {
	if r.Buffered() < frameHeader {
		return false
	}
	head, err := r.Peek(frameHeader)
	if err != nil {
		return false
	}
	return r.Buffered()-frameHeader >= int(binary.BigEndian.Uint32(head))
}
