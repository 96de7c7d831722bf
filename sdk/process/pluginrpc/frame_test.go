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
