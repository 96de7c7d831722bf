package pluginrpc

import (
	"errors"
	"math"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
)

// TestArgsMatchTheABICodec holds ArgsToPB and ArgsFromPB to abi.AppendArg
// and abi.DecodeArg: a process plugin's script sees what a Wasm guest's
// would, and the wire bytes are the same.
func TestArgsMatchTheABICodec(t *testing.T) {
	args := []any{nil, "", "text", "\x00\xff bytes", []byte("raw"), []byte(nil), true, false,
		int(-7), int8(-8), int16(300), int32(-70000), int64(math.MinInt64), uint(7), uint8(255), uint16(65535),
		uint32(1 << 31), uint64(math.MaxInt64), uint64(math.MaxUint64), float32(1.5), math.Pi, math.Inf(-1),
		1500 * time.Millisecond, time.Date(2026, 11, 22, 3, 4, 5, 6, time.UTC), netip.MustParseAddr("192.0.2.1")}
	pb, err := ArgsToPB(args)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ArgsFromPB(pb)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range args {
		enc, err := abi.AppendArg(nil, a)
		if err != nil {
			t.Fatalf("%d %T: %v", i, a, err)
		}
		want, err := abi.DecodeArg(enc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("%d %T %v: got %#v, want %#v", i, a, a, got[i], want)
		}
		wire, err := proto.Marshal(pb[i])
		if err != nil {
			t.Fatal(err)
		}
		if fromWire, err := abi.DecodeArg(wire); err != nil || !reflect.DeepEqual(fromWire, want) {
			t.Errorf("%d %T: the generated encoding decodes as %#v (%v), want %#v", i, a, fromWire, err, want)
		}
	}
	if _, err := ArgsToPB([]any{struct{}{}}); !errors.Is(err, abi.ErrArgType) {
		t.Errorf("a struct argument: %v", err)
	}
	list := &abipb.Value{Kind: &abipb.Value_ListValue{ListValue: &abipb.ValueList{}}}
	if _, err := ArgsFromPB([]*abipb.Value{list}); !errors.Is(err, abi.ErrArgType) {
		t.Errorf("a list argument: %v", err)
	}
}

func TestRepliesMatchTheABICodec(t *testing.T) {
	for _, r := range []sdk.Reply{
		sdk.NewReply(nil), sdk.NewReply(int64(-3)), sdk.NewReply("bin\x00ary"),
		sdk.NewReply([]any{int64(1), "two", nil, []any{int64(3), []any{}}}),
	} {
		got, err := ReplyFromPB(ReplyToPB(r))
		if err != nil || !got.Equal(r) {
			t.Errorf("%v: round trip gave %v, %v", r, got, err)
		}
		wire, err := proto.Marshal(ReplyToPB(r))
		if err != nil {
			t.Fatal(err)
		}
		if fromWire, err := abi.DecodeReply(wire); err != nil || !fromWire.Equal(r) {
			t.Errorf("%v: abi.DecodeReply of the generated encoding gave %v, %v", r, fromWire, err)
		}
	}
	_, err := ReplyFromPB(ReplyErrorToPB(&abi.Error{Class: "timeout", Message: "slow"}))
	var e *abi.Error
	if !errors.As(err, &e) || e.Class != "timeout" || e.Message != "slow" {
		t.Fatalf("error reply: %v", err)
	}
	deep := &abipb.Reply{}
	for range 100 {
		deep = &abipb.Reply{Kind: &abipb.Reply_ArrayValue{ArrayValue: &abipb.ReplyArray{Elems: []*abipb.Reply{deep}}}}
	}
	if _, err := ReplyFromPB(deep); err == nil {
		t.Fatal("a reply nested 100 deep was accepted")
	}
}

func TestConfigureRoundTrip(t *testing.T) {
	raw := map[string]any{"limit": 5, "window": "1m", "ratio": 0.5, "on": true, "d": 3 * time.Second,
		"also": []any{map[string]any{"limit": int64(2)}}, "big": uint64(math.MaxUint64), "nothing": nil}
	m, err := ConfigureToPB(9, raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ConfigureFromPB(m)
	if err != nil {
		t.Fatal(err)
	}
	want := abi.ConfigureRequest{}
	enc, _ := (&abi.ConfigureRequest{ConfigID: 9, Config: raw}).Append(nil)
	if err := want.Decode(enc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.ConfigID != 9 || got.Config["limit"] != 5 {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
	if _, err := ConfigureToPB(1, map[string]any{"bad": struct{}{}}); err == nil {
		t.Fatal("a config value of an unknown type was accepted")
	}
}

func TestRequestsDecisionsAndInfo(t *testing.T) {
	r := sdk.Request{Subject: "s\x00ubject", Hits: -2, DedupID: "d", BestEffort: true, Queue: true, Attrs: map[string]string{"a": "b"}}
	if got := RequestFromPB(RequestToPB(4, &r)); !reflect.DeepEqual(got, r) {
		t.Errorf("request %+v", got)
	}
	d := sdk.Decision{Allowed: true, Granted: 3, Limit: 10, Remaining: 7, Window: time.Minute, Reset: 1500 * time.Microsecond,
		RetryAfter: time.Second, Delay: 3 * time.Microsecond}
	if got := DecisionFromPB(DecisionToPB(&d)); got != d {
		t.Errorf("decision %+v", got)
	}
	info := sdk.Info{Name: "x", Version: "1", Scripts: []sdk.Script{{Name: "a", Source: "return 1", Commands: []string{"GET"}}}}
	if got := InfoFromPB(InfoToPB(&info)); !reflect.DeepEqual(got, info) {
		t.Errorf("info %+v", got)
	}
	joined := errors.Join(errors.New("a"), errors.Join(errors.New("b"), errors.New("c")))
	if got := ConfigErrors(joined, nil); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("config errors %v", got)
	}
}
