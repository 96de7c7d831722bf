package pluginrpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ruled-dev/ruled/sdk/abi/abipb"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
)

func TestFramesRoundTrip(t *testing.T) {
	calls := []*pluginpb.StepCall{
		{Id: 1, Step: &abipb.StepRequest{ConfigId: 7, Subject: []byte("a"), Hits: 2}},
		{}, // an empty message is a frame of length 0
		{Id: 3, Step: &abipb.StepRequest{Subject: bytes.Repeat([]byte("s"), 70000)}},
	}
	var b []byte
	for _, c := range calls {
		var err error
		if b, err = AppendFrame(b, c); err != nil {
			t.Fatal(err)
		}
	}
	r := bufio.NewReaderSize(bytes.NewReader(b), 16)
	var buf []byte
	for i, want := range calls {
		var got pluginpb.StepCall
		var err error
		if buf, err = ReadFrame(r, buf, &got); err != nil || !proto.Equal(&got, want) {
			t.Fatalf("frame %d: %v, %v", i, &got, err)
		}
	}
	if _, err := ReadFrame(r, buf, &pluginpb.StepCall{}); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFramesOverTheBoundOrCutShortAreErrors(t *testing.T) {
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], MaxMessage+1)
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(head[:])), nil, &pluginpb.StepCall{}); err == nil ||
		!strings.Contains(err.Error(), "over the") {
		t.Fatalf("a frame over the bound: %v", err)
	}
	b, _ := AppendFrame(nil, &pluginpb.StepCall{Id: 9})
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b[:len(b)-1])), nil, &pluginpb.StepCall{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v", err)
	}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b[:2])), nil, &pluginpb.StepCall{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a header cut short: %v", err)
	}
	big := &pluginpb.StepCall{Step: &abipb.StepRequest{Subject: bytes.Repeat([]byte("x"), MaxMessage)}}
	if out, err := AppendFrame([]byte("kept"), big); err == nil || string(out) != "kept" {
		t.Fatalf("appending a frame over the bound: %q, %v", out[:min(len(out), 8)], err)
	}
}

func TestFrameBufferedSaysWhenAWholeFrameWaits(t *testing.T) {
	b, _ := AppendFrame(nil, &pluginpb.StepCall{Id: 1, Step: &abipb.StepRequest{Subject: []byte("abc")}})
	for n := 0; n <= len(b); n++ {
		r := bufio.NewReader(bytes.NewReader(b[:n]))
		_, _ = r.Peek(n) // fill the buffer with what there is
		if got, want := FrameBuffered(r), n == len(b); got != want {
			t.Errorf("%d of %d bytes buffered: %v, want %v", n, len(b), got, want)
		}
	}
}

// stutter gives its chunks one Read at a time, failing with errTimeout
// between two chunks, as a connection whose read deadline passes does.
type stutter struct {
	chunks [][]byte
	failed bool
}

var errTimeout = errors.New("i/o timeout")

func (s *stutter) Read(p []byte) (int, error) {
	if len(s.chunks) == 0 {
		return 0, io.EOF
	}
	if !s.failed {
		s.failed = true
		return 0, errTimeout
	}
	s.failed = false
	n := copy(p, s.chunks[0])
	if s.chunks[0] = s.chunks[0][n:]; len(s.chunks[0]) == 0 {
		s.chunks = s.chunks[1:]
	}
	return n, nil
}

func TestAFrameThatFitsTheBufferSurvivesAFailedRead(t *testing.T) {
	want := &pluginpb.StepCall{Id: 5, Step: &abipb.StepRequest{Subject: []byte("subject")}}
	b, _ := AppendFrame(nil, want)
	r := bufio.NewReader(&stutter{chunks: [][]byte{b[:2], b[2:7], b[7:]}})
	var got pluginpb.StepCall
	fails := 0
	for {
		_, err := ReadFrame(r, nil, &got)
		if err == nil {
			break
		}
		if !errors.Is(err, errTimeout) || errors.Is(err, ErrFrameCut) || fails > 10 {
			t.Fatalf("read %d: %v", fails, err)
		}
		fails++
	}
	if !proto.Equal(&got, want) || fails != 3 {
		t.Fatalf("got %v after %d failed reads, want %v after 3", &got, fails, want)
	}

	big := &pluginpb.StepCall{Id: 6, Step: &abipb.StepRequest{Subject: bytes.Repeat([]byte("b"), 100)}}
	b, _ = AppendFrame(nil, big)
	r = bufio.NewReaderSize(&stutter{chunks: [][]byte{b[:10], b[10:]}}, 16)
	var err error
	for range 3 {
		if _, err = ReadFrame(r, nil, &got); errors.Is(err, ErrFrameCut) {
			break
		}
	}
	if !errors.Is(err, ErrFrameCut) || !errors.Is(err, errTimeout) {
		t.Fatalf("a frame larger than the buffer, cut by a failed read: %v, want ErrFrameCut", err)
	}
}
