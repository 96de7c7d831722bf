package pluginrpc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/process/pluginpb"
)

// stepCall is a StepCall for the step of deciding subject under config 7.
func stepCall(id uint64, subject string) *abi.StepCall {
	return &abi.StepCall{ID: id, Step: abi.StepRequest{DecideRequest: abi.DecideRequest{ConfigID: 7,
		Request: sdk.Request{Subject: subject, Hits: 2}}}}
}

func TestFramesRoundTrip(t *testing.T) {
	calls := []*abi.StepCall{
		stepCall(1, "a"),
		{}, // the zero message
		stepCall(3, strings.Repeat("s", 70000)),
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
		var got abi.StepCall
		var err error
		if buf, err = ReadFrame(r, buf, &got); err != nil || !reflect.DeepEqual(&got, want) {
			t.Fatalf("frame %d: %v, %v", i, &got, err)
		}
	}
	if _, err := ReadFrame(r, buf, &abi.StepCall{}); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestFramesOverTheBoundOrCutShortAreErrors(t *testing.T) {
	var head [4]byte
	binary.BigEndian.PutUint32(head[:], MaxMessage+1)
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(head[:])), nil, &abi.StepCall{}); err == nil ||
		!strings.Contains(err.Error(), "over the") {
		t.Fatalf("a frame over the bound: %v", err)
	}
	b, _ := AppendFrame(nil, &abi.StepCall{ID: 9})
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b[:len(b)-1])), nil, &abi.StepCall{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a frame cut short: %v", err)
	}
	if _, err := ReadFrame(bufio.NewReader(bytes.NewReader(b[:2])), nil, &abi.StepCall{}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a header cut short: %v", err)
	}
	big := stepCall(1, strings.Repeat("x", MaxMessage))
	if out, err := AppendFrame([]byte("kept"), big); err == nil || string(out) != "kept" {
		t.Fatalf("appending a frame over the bound: %q, %v", out[:min(len(out), 8)], err)
	}
}

func TestFrameBufferedSaysWhenAWholeFrameWaits(t *testing.T) {
	b, _ := AppendFrame(nil, stepCall(1, "abc"))
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
	want := stepCall(5, "subject")
	b, _ := AppendFrame(nil, want)
	r := bufio.NewReader(&stutter{chunks: [][]byte{b[:2], b[2:7], b[7:]}})
	var got abi.StepCall
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
	if !reflect.DeepEqual(&got, want) || fails != 3 {
		t.Fatalf("got %+v after %d failed reads, want %+v after 3", &got, fails, want)
	}

	big := stepCall(6, strings.Repeat("b", 100))
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

// TestStepsRoundTrip holds StepCall and StepAnswer to the messages of
// plugin.proto: each side decodes what the other's generated code encodes.
func TestStepsRoundTrip(t *testing.T) {
	r := sdk.Request{Subject: "s", Hits: 3, DedupID: "d", Attrs: map[string]string{"a": "b"}}
	first := abi.StepCall{ID: 4, Step: abi.StepRequest{DecideRequest: abi.DecideRequest{ConfigID: 9, Request: r}}}
	var got abi.StepCall
	if err := roundTrip(&first, &got, &pluginpb.StepCall{}); err != nil || got.ID != 4 || got.Step.ConfigID != 9 ||
		got.Step.Resume || !reflect.DeepEqual(got.Step.Request, r) {
		t.Fatalf("first step: %+v %v", got, err)
	}
	resumed := first
	resumed.Step.Resume, resumed.Step.Script, resumed.Step.State, resumed.Step.Reply = true, "decide", []byte("st"), sdk.IntsReply(1, 2)
	if err := roundTrip(&resumed, &got, &pluginpb.StepCall{}); err != nil || !got.Step.Resume || got.Step.Script != "decide" ||
		string(got.Step.State) != "st" || !got.Step.Reply.Equal(sdk.IntsReply(1, 2)) {
		t.Fatalf("resumed step: %+v %v", got, err)
	}

	call := abi.StepAnswer{ID: 4, Step: abi.StepResponse{Call: abi.EvalRequest{Script: "decide", Keys: []string{"k"},
		Args: []any{int64(4), "x"}}, Decides: true, Window: time.Minute, State: []byte{7}}}
	var back abi.StepAnswer
	if err := roundTrip(&call, &back, &pluginpb.StepAnswer{}); err != nil || back.ID != 4 || back.Step.Call.Script != "decide" ||
		!reflect.DeepEqual(back.Step.Call.Keys, []string{"k"}) || !reflect.DeepEqual(back.Step.Call.Args, []any{int64(4), "x"}) ||
		!back.Step.Decides || back.Step.Window != time.Minute || string(back.Step.State) != "\x07" {
		t.Fatalf("call step: %+v %v", back, err)
	}
	final := abi.StepAnswer{ID: 5, Step: abi.StepResponse{DecideResponse: abi.DecideResponse{
		Decision: sdk.Decision{Allowed: true, Limit: 5, Window: time.Second}}}}
	if err := roundTrip(&final, &back, &pluginpb.StepAnswer{}); err != nil || back.ID != 5 || back.Step.Call.Script != "" ||
		back.Step.Decision != final.Step.Decision {
		t.Fatalf("final step: %+v %v", back, err)
	}
	bad := abi.StepAnswer{ID: 6, Step: abi.StepResponse{Call: abi.EvalRequest{Script: "decide", Args: []any{struct{}{}}}}}
	if _, err := AppendFrame(nil, &bad); err == nil {
		t.Fatal("an argument that cannot cross was sent")
	}
}

// roundTrip encodes in, decodes it with the generated code into pb,
// encodes pb again and decodes that into out.
func roundTrip(in interface{ Append([]byte) ([]byte, error) }, out interface{ Decode([]byte) error }, pb proto.Message) error {
	b, err := in.Append(nil)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, pb); err != nil {
		return err
	}
	if b, err = proto.Marshal(pb); err != nil {
		return err
	}
	return out.Decode(b)
}
