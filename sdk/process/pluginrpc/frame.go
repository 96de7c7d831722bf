package pluginrpc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frameHeader is the length prefix of a frame on the steps socket.
const frameHeader = 4

// AppendFrame appends m to b as one frame of the steps socket: its length
// as a 4-byte big-endian unsigned integer, then its bytes.
func AppendFrame(b []byte, m interface{ Append([]byte) ([]byte, error) }) ([]byte, error) {
	start := len(b)
	b = append(b, 0, 0, 0, 0)
	b, err := m.Append(b)
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

// ErrFrameCut wraps the errors of a ReadFrame that consumed part of a frame
// before it failed: the stream cannot be read on.
var ErrFrameCut = errors.New("frame cut short")

// ReadFrame reads one frame from r into m, using buf for its bytes when the
// frame does not fit r's buffer, and returns the buffer for the next call.
// It returns io.EOF only when r ends between two frames. A frame that fits
// r's buffer is consumed only once it is whole, so that a read that fails
// (a read deadline passing, say) may be tried again; a larger frame is read
// through, and an error after its first bytes wraps ErrFrameCut. A frame
// read whole that does not decode is consumed: the stream reads on.
func ReadFrame(r *bufio.Reader, buf []byte, m interface{ Decode([]byte) error }) ([]byte, error) {
	head, err := r.Peek(frameHeader)
	if err != nil {
		if len(head) > 0 && errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf, err
	}
	n := int(binary.BigEndian.Uint32(head))
	if n > MaxMessage {
		return buf, fmt.Errorf("%w: a frame of %d bytes is over the %d-byte bound", ErrFrameCut, n, MaxMessage)
	}
	if frameHeader+n <= r.Size() {
		b, err := r.Peek(frameHeader + n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return buf, err
		}
		err = m.Decode(b[frameHeader:]) // sdk/abi's decoders copy what they keep
		_, _ = r.Discard(frameHeader + n)
		if err != nil {
			return buf, fmt.Errorf("decoding a %T frame: %w", m, err)
		}
		return buf, nil
	}
	_, _ = r.Discard(frameHeader)
	if n > cap(buf) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return buf, fmt.Errorf("%w: reading a frame of %d bytes: %w", ErrFrameCut, n, err)
	}
	if err := m.Decode(buf); err != nil {
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
