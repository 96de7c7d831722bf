package abi_test

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
)

var longSource = strings.Repeat("-- a long script line\n", 900) // > 16 KiB: a 3-byte length

func testInfo() sdk.Info {
	return sdk.Info{Name: "gcra", Version: "1.2.3", Scripts: []sdk.Script{
		{Name: "decide", Source: longSource, Commands: []string{"HGET", "HSET", "PEXPIRE"}, Returns: sdk.DecisionShape},
		{Name: "peek", Source: "return 1", Commands: nil},
	}, Traits: sdk.Traits{FirmDenials: true, Refunds: true, Releases: true}}
}

func TestInfoRoundTripAndSchema(t *testing.T) {
	info := testInfo()
	b := abi.AppendInfo(nil, &info, true)
	got, steps, err := abi.DecodeInfo(b)
	if err != nil || !reflect.DeepEqual(got, info) || !steps {
		t.Fatalf("round trip: %+v, %v, %v", got, steps, err)
	}
	var pb abipb.Info
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	if pb.Name != "gcra" || len(pb.Scripts) != 2 || pb.Scripts[0].Source != longSource ||
		!reflect.DeepEqual(pb.Scripts[0].Commands, []string{"HGET", "HSET", "PEXPIRE"}) ||
		!pb.Traits.GetFirmDenials() || pb.Traits.GetLeasable() || !pb.Traits.GetRefunds() || !pb.Traits.GetReleases() ||
		!reflect.DeepEqual(pb.Scripts[0].Returns, sdk.DecisionShape.Names()) || pb.Scripts[1].Returns != nil || !pb.Steps {
		t.Fatalf("generated code reads %v", &pb)
	}
	pbBytes, _ := proto.Marshal(&pb)
	if got, steps, err = abi.DecodeInfo(pbBytes); err != nil || !reflect.DeepEqual(got, info) || !steps {
		t.Fatalf("from generated code: %+v, %v", got, err)
	}
	// A module built before traits, shapes and steps existed declares none.
	info.Traits, info.Scripts[0].Returns = sdk.Traits{}, nil
	if got, steps, err = abi.DecodeInfo(abi.AppendInfo(nil, &info, false)); err != nil || got.Traits != (sdk.Traits{}) ||
		got.Scripts[0].Returns != nil || steps {
		t.Fatalf("no traits: %+v, %v, %v", got.Traits, steps, err)
	}
}

func testConfig() map[string]any {
	return map[string]any{
		"limit":  100,
		"big":    uint64(math.MaxUint64),
		"ratio":  0.25,
		"window": "1m",
		"per":    1500 * time.Millisecond,
		"on":     true,
		"none":   nil,
		"also": []any{
			map[string]any{"limit": -5, "window": "1h"},
			[]any{"x", 1, false},
		},
		"empty": map[string]any{},
	}
}

func TestConfigureRequestRoundTripAndSchema(t *testing.T) {
	m := abi.ConfigureRequest{ConfigID: 42, Config: testConfig()}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got abi.ConfigureRequest
	if err := got.Decode(b); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip:\n got %#v\nwant %#v\n%v", got, m, err)
	}

	var pb abipb.ConfigureRequest
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	f := pb.Config.Fields
	if pb.ConfigId != 42 || f["limit"].GetIntValue() != 100 || f["big"].GetUintValue() != math.MaxUint64 ||
		f["ratio"].GetFloatValue() != 0.25 || f["window"].GetStringValue() != "1m" ||
		f["per"].GetDurationNs() != int64(1500*time.Millisecond) || !f["on"].GetBoolValue() ||
		!f["none"].GetNullValue() || f["also"].GetListValue().Values[0].GetMapValue().Fields["limit"].GetIntValue() != -5 {
		t.Fatalf("generated code reads %v", &pb)
	}
	pbBytes, _ := proto.Marshal(&pb)
	if err := got.Decode(pbBytes); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("from generated code: %#v, %v", got, err)
	}
}

func TestConfigureRequestRejectsUnknownTypes(t *testing.T) {
	m := abi.ConfigureRequest{ConfigID: 1, Config: map[string]any{"f": func() {}}}
	if _, err := m.Append(nil); err == nil || !strings.Contains(err.Error(), "f: abi: cannot encode a value of type func()") {
		t.Fatalf("err = %v", err)
	}
}

func TestEmptyConfigDecodesAsEmptyMap(t *testing.T) {
	var got abi.ConfigureRequest
	if err := got.Decode(nil); err != nil || got.Config == nil || len(got.Config) != 0 {
		t.Fatalf("%#v, %v", got, err)
	}
}

func TestConfigureResponse(t *testing.T) {
	for _, e := range [][]string{nil, {"limit: required", "window: required"}} {
		b, err := (&abi.ConfigureResponse{Errors: e}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		var got abi.ConfigureResponse
		if err := got.Decode(b); err != nil || !reflect.DeepEqual(got.Errors, e) {
			t.Fatalf("%q: %q %v", e, got.Errors, err)
		}
		var pb abipb.ConfigureResponse
		if err := proto.Unmarshal(b, &pb); err != nil || len(pb.Errors) != len(e) {
			t.Fatalf("generated code reads %v (%v)", &pb, err)
		}
	}
}

func TestConfigureResponseTemplateRoundTripAndSchema(t *testing.T) {
	tmpl := sdk.Run("decide", []string{"c", "d"}, int64(100), sdk.FieldHits, "x", sdk.FieldDedupID, sdk.FieldBestEffort,
		sdk.FieldSubject).ThenDecide(time.Minute)
	tmpl.State = []byte{7}
	b, err := (&abi.ConfigureResponse{Template: &tmpl}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got abi.ConfigureResponse
	if err := got.Decode(b); err != nil || got.Template == nil || !reflect.DeepEqual(*got.Template, tmpl) {
		t.Fatalf("round trip: %#v, %v", got.Template, err)
	}
	var pb abipb.ConfigureResponse
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	args := pb.GetTemplate().GetCall().GetArgs()
	if len(args) != 6 || args[1].GetRequestField() != abipb.RequestField_REQUEST_FIELD_HITS ||
		args[3].GetRequestField() != abipb.RequestField_REQUEST_FIELD_DEDUP_ID ||
		args[4].GetRequestField() != abipb.RequestField_REQUEST_FIELD_BEST_EFFORT ||
		args[5].GetRequestField() != abipb.RequestField_REQUEST_FIELD_SUBJECT ||
		!pb.GetTemplate().GetDecides() || pb.GetTemplate().GetWindowUs() != 60e6 {
		t.Fatalf("generated code reads %v", &pb)
	}
	// The fields' numbers are sdk.Field's.
	for f := sdk.FieldHits; f.Valid(); f++ {
		if name := abipb.RequestField(f).String(); name != "REQUEST_FIELD_"+strings.ToUpper(f.String()) {
			t.Errorf("sdk.Field %v is %s in ruled.proto", f, name)
		}
	}
}

func TestRequestFieldsCrossOnlyInTemplates(t *testing.T) {
	call := abi.EvalRequest{Script: "decide", Keys: []string{"k"}, Args: []any{sdk.FieldHits}}
	b, err := call.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got abi.EvalRequest
	if err := got.Decode(b); !errors.Is(err, abi.ErrFieldOutsideTemplate) {
		t.Fatalf("a field in an Eval call: %v", err)
	}
	step := abi.StepResponse{Call: call}
	if b, err = step.Append(nil); err != nil {
		t.Fatal(err)
	}
	var gotStep abi.StepResponse
	if err := gotStep.Decode(b); !errors.Is(err, abi.ErrFieldOutsideTemplate) {
		t.Fatalf("a field in a step: %v", err)
	}

	// In a template: an unknown field, or a template that calls nothing, is refused.
	for name, pb := range map[string]*abipb.ConfigureResponse{
		"unknown field": {Template: &abipb.StepResponse{Call: &abipb.EvalRequest{Script: "decide",
			Args: []*abipb.Value{{Kind: &abipb.Value_RequestField{RequestField: 9}}}}}},
		"no call": {Template: &abipb.StepResponse{Decides: true}},
	} {
		b, err := proto.Marshal(pb)
		if err != nil {
			t.Fatal(err)
		}
		var got abi.ConfigureResponse
		if err := got.Decode(b); err == nil {
			t.Errorf("%s: decoded %#v", name, got.Template)
		}
	}
}

func TestDecideRequestRoundTripAndSchema(t *testing.T) {
	m := abi.DecideRequest{ConfigID: 7, Request: sdk.Request{
		Subject: "\xff\x00bytes", Hits: -3, DedupID: "d-1", BestEffort: true, Queue: true,
		Attrs: map[string]string{"tenant": "acme", "tier": ""},
	}}
	b := m.Append(nil)
	var got abi.DecideRequest
	if err := got.Decode(b); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %#v, %v", got, err)
	}
	var pb abipb.DecideRequest
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	if pb.ConfigId != 7 || string(pb.Subject) != "\xff\x00bytes" || pb.Hits != -3 || string(pb.DedupId) != "d-1" ||
		!pb.BestEffort || !pb.Queue || pb.Attrs["tenant"] != "acme" {
		t.Fatalf("generated code reads %v", &pb)
	}
	// The zero request is empty on the wire and decodes with nil attrs.
	if b := (&abi.DecideRequest{}).Append(nil); len(b) != 0 {
		t.Fatalf("zero request encodes to %x", b)
	}
}

func TestDecideResponseRoundTripAndSchema(t *testing.T) {
	us := time.Microsecond
	m := abi.DecideResponse{Decision: sdk.Decision{
		Allowed: true, Granted: -2, Limit: 1 << 50, Remaining: 3,
		Window: time.Hour, Reset: 1234567 * us, RetryAfter: 0, Delay: 999 * us,
	}}
	b := m.Append(nil)
	var got abi.DecideResponse
	if err := got.Decode(b); err != nil || got != m {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	var pb abipb.DecideResponse
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	if d := pb.Decision; !d.Allowed || d.Granted != -2 || d.Limit != 1<<50 || d.WindowUs != 3600e6 || d.ResetUs != 1234567 || d.DelayUs != 999 {
		t.Fatalf("generated code reads %v", &pb)
	}
	// Durations cross in whole microseconds.
	m.Decision.Reset = 1500 * time.Nanosecond
	if err := got.Decode(m.Append(nil)); err != nil || got.Decision.Reset != us {
		t.Fatalf("sub-microsecond reset: %v %v", got.Decision.Reset, err)
	}
	if err := got.Decode((&abi.DecideResponse{Error: "boom"}).Append(nil)); err != nil || got.Error != "boom" || got.Decision != (sdk.Decision{}) {
		t.Fatalf("error response: %+v %v", got, err)
	}
	bad := (&abi.DecideResponse{Error: "no lease id", BadRequest: true}).Append(nil)
	if err := got.Decode(bad); err != nil || !got.BadRequest || got.Error != "no lease id" {
		t.Fatalf("bad request response: %+v %v", got, err)
	}
	if err := proto.Unmarshal(bad, &pb); err != nil || !pb.BadRequest {
		t.Fatalf("generated code reads %v, %v", &pb, err)
	}
}

type marshaler struct{}

func (marshaler) MarshalBinary() ([]byte, error) { return []byte("bin"), nil }

// emptyError is an error whose message is empty.
type emptyError struct{}

func (emptyError) Error() string { return "" }

// TestDecideError: what crosses for Decide's error, in a Wasm guest and a
// process plugin alike. A refusal as bad input crosses as its message and
// the mark, wrapped or not; no error crosses with an empty message, which
// would read as no error at all.
func TestDecideError(t *testing.T) {
	for _, c := range []struct {
		name    string
		err     error
		msg     string
		badReqs bool
	}{
		{"plain", errors.New("redis: down"), "redis: down", false},
		{"bad request", sdk.BadRequest("hits must be 1, got %d", 3), "hits must be 1, got 3", true},
		{"wrapped bad request", fmt.Errorf("limiter: %w", sdk.BadRequest("no lease id")), "no lease id", true},
		{"empty", emptyError{}, "Decide failed with an empty abi_test.emptyError", false},
		{"bad request without a message", &sdk.BadRequestError{}, "Decide failed with an empty *sdk.BadRequestError", true},
	} {
		msg, bad := abi.DecideError(c.err)
		if msg != c.msg || bad != c.badReqs {
			t.Errorf("%s: %q %v, want %q %v", c.name, msg, bad, c.msg, c.badReqs)
		}
	}
}

// AnsweredError reads back what DecideError wrote: nothing, a refusal of
// bad input, or a failure that names the plugin and unwraps to its cause.
func TestAnsweredError(t *testing.T) {
	if err := abi.AnsweredError("wasm", "p", "", false, errors.New("unused")); err != nil {
		t.Fatalf("no error answered: %v", err)
	}
	msg, bad := abi.DecideError(sdk.BadRequest("no lease id"))
	var br *sdk.BadRequestError
	if err := abi.AnsweredError("wasm", "p", msg, bad, nil); !errors.As(err, &br) || br.Message != "no lease id" {
		t.Fatalf("bad request: %v", err)
	}
	cause := errors.New("capability: timeout")
	msg, bad = abi.DecideError(errors.New("boom"))
	err := abi.AnsweredError("process", "gcra", msg, bad, cause)
	if err == nil || err.Error() != "process plugin gcra: boom" || !errors.Is(err, cause) {
		t.Fatalf("failure: %v", err)
	}
}

func TestEvalRequestRoundTripAndSchema(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	m := abi.EvalRequest{Script: "decide", Keys: []string{"c", "d"},
		Args: []any{int64(5), 7, "\xffraw", []byte("b"), true, 0.5, time.Second, nil, uint64(math.MaxUint64), at, marshaler{}}}
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var got abi.EvalRequest
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	want := []any{int64(5), int64(7), "\xffraw", "b", true, 0.5, time.Second, nil, uint64(math.MaxUint64),
		at.Format(time.RFC3339Nano), "bin"}
	if got.Script != "decide" || !reflect.DeepEqual(got.Keys, m.Keys) || !reflect.DeepEqual(got.Args, want) {
		t.Fatalf("round trip: %#v", got)
	}
	var pb abipb.EvalRequest
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	if pb.Script != "decide" || len(pb.Args) != len(want) || string(pb.Args[2].GetBytesValue()) != "\xffraw" {
		t.Fatalf("generated code reads %v", &pb)
	}
	// Reuse keeps capacity and forgets old content.
	small := abi.EvalRequest{Script: "s", Args: []any{1}}
	b, _ = small.Append(b[:0])
	if err := got.Decode(b); err != nil || len(got.Keys) != 0 || !reflect.DeepEqual(got.Args, []any{int64(1)}) {
		t.Fatalf("reuse: %#v %v", got, err)
	}
}

func TestEvalRequestRefusesStructuredArgs(t *testing.T) {
	for _, a := range []any{[]any{1}, map[string]any{}, struct{}{}} {
		m := abi.EvalRequest{Script: "s", Args: []any{a}}
		if _, err := m.Append(nil); !errors.Is(err, abi.ErrArgType) {
			t.Errorf("%T: %v", a, err)
		}
	}
	// A list smuggled in by a hand-written guest is refused by the decoder.
	v, _ := abi.AppendValue(nil, []any{1})
	pb := &abipb.EvalRequest{Script: "s"}
	var lv abipb.Value
	if err := proto.Unmarshal(v, &lv); err != nil {
		t.Fatal(err)
	}
	pb.Args = append(pb.Args, &lv)
	b, _ := proto.Marshal(pb)
	var got abi.EvalRequest
	if err := got.Decode(b); !errors.Is(err, abi.ErrArgType) {
		t.Fatalf("decode list argument: %v", err)
	}
}

func TestReplyRoundTripAndSchema(t *testing.T) {
	r := sdk.NewReply([]any{int64(1), "two", nil, []any{int64(-4), strings.Repeat("x", 300)}, []any{}})
	b := abi.AppendReply(nil, r)
	got, err := abi.DecodeReply(b)
	if err != nil || !got.Equal(r) {
		t.Fatalf("round trip: %#v, %v", got, err)
	}
	var pb abipb.Reply
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	elems := pb.GetArrayValue().Elems
	if len(elems) != 5 || elems[0].GetIntValue() != 1 || string(elems[1].GetStringValue()) != "two" || !elems[2].GetNullValue() ||
		len(elems[3].GetArrayValue().Elems) != 2 || elems[4].GetArrayValue() == nil {
		t.Fatalf("generated code reads %v", &pb)
	}
	for _, single := range []sdk.Reply{sdk.NewReply(nil), sdk.NewReply(int64(0)), sdk.NewReply("")} {
		got, err := abi.DecodeReply(abi.AppendReply(nil, single))
		if err != nil || !got.Equal(single) {
			t.Fatalf("%#v: %#v %v", single, got, err)
		}
	}
	// An empty message is a nil reply.
	if got, err := abi.DecodeReply(nil); err != nil || !got.IsNil() {
		t.Fatalf("empty: %#v %v", got, err)
	}
}

func TestReplyError(t *testing.T) {
	b := abi.AppendReplyError(nil, &abi.Error{Class: "refused", Message: "script \"x\" was not declared"})
	_, err := abi.DecodeReply(b)
	var e *abi.Error
	if !errors.As(err, &e) || e.Class != "refused" || !strings.Contains(e.Error(), "not declared") {
		t.Fatalf("err = %#v", err)
	}
	var pb abipb.Reply
	if err := proto.Unmarshal(b, &pb); err != nil || pb.GetError().Class != "refused" {
		t.Fatalf("generated code reads %v (%v)", &pb, err)
	}
}

func TestInitRequest(t *testing.T) {
	var got abi.InitRequest
	if err := got.Decode((&abi.InitRequest{ABIVersion: abi.Version}).Append(nil)); err != nil || got.ABIVersion != 1 {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestUnknownFieldsAreSkipped(t *testing.T) {
	// A newer host may send fields this reader does not know.
	b := (&abi.DecideRequest{ConfigID: 3, Request: sdk.Request{Subject: "s", Hits: 1}}).Append(nil)
	b = append(b, 0xf8, 0x01, 0x05)                   // field 31, varint 5
	b = append(b, 0xfa, 0x01, 0x02, 'h', 'i')         // field 31, bytes "hi"
	b = append(b, 0xfd, 0x01, 1, 2, 3, 4)             // field 31, fixed32
	b = append(b, 0xf9, 0x01, 1, 2, 3, 4, 5, 6, 7, 8) // field 31, fixed64
	b = append(b, 0x10, 0x02)                         // field 2 with the wrong wire type: skipped
	var got abi.DecideRequest
	if err := got.Decode(b); err != nil || got.ConfigID != 3 || got.Request.Subject != "s" || got.Request.Hits != 1 {
		t.Fatalf("%+v %v", got, err)
	}
}

func TestTruncatedMessagesFail(t *testing.T) {
	full := (&abi.DecideRequest{ConfigID: 3, Request: sdk.Request{Subject: "subject", Hits: 1}}).Append(nil)
	for n := 1; n < len(full); n++ {
		var got abi.DecideRequest
		err := got.Decode(full[:n])
		// Every cut either fails or lands on a field boundary.
		if err == nil && got.Request.Subject != "" && got.Request.Subject != "subject" {
			t.Fatalf("cut at %d decoded a partial subject %q", n, got.Request.Subject)
		}
	}
	if _, err := abi.DecodeReply([]byte{0x22, 0x05, 0x0a}); err == nil {
		t.Fatal("truncated array decoded")
	}
}

func TestDeepNestingIsRefused(t *testing.T) {
	var v any = 1
	for range 100 {
		v = []any{v}
	}
	if _, err := abi.AppendValue(nil, v); err == nil {
		t.Fatal("encoded a value nested 100 deep")
	}
	// Hand-build a reply nested 100 deep.
	b := abi.AppendReply(nil, sdk.NewReply(int64(1)))
	for range 100 {
		b = abi.AppendReply(nil, sdk.NewReply([]sdk.Reply{mustDecode(t, b)}))
	}
	if _, err := abi.DecodeReply(b); err == nil || !strings.Contains(err.Error(), "nested too deeply") {
		t.Fatalf("decoded a reply nested 100 deep: %v", err)
	}
}

// mustDecode decodes without the depth limit mattering (one level at a time).
func mustDecode(t *testing.T, b []byte) sdk.Reply {
	t.Helper()
	var pb abipb.Reply
	if err := proto.Unmarshal(b, &pb); err != nil {
		t.Fatal(err)
	}
	return fromPB(&pb)
}

func fromPB(pb *abipb.Reply) sdk.Reply {
	switch k := pb.Kind.(type) {
	case *abipb.Reply_IntValue:
		return sdk.NewReply(k.IntValue)
	case *abipb.Reply_StringValue:
		return sdk.NewReply(string(k.StringValue))
	case *abipb.Reply_ArrayValue:
		arr := make([]sdk.Reply, len(k.ArrayValue.Elems))
		for i, e := range k.ArrayValue.Elems {
			arr[i] = fromPB(e)
		}
		return sdk.NewReply(arr)
	}
	return sdk.Reply{}
}

func TestPackUnpack(t *testing.T) {
	p := abi.Pack(0xdeadbeef, 12)
	if ptr, n := abi.Unpack(p); ptr != 0xdeadbeef || n != 12 {
		t.Fatalf("%x %d", ptr, n)
	}
	if !abi.IsStatus(int64(abi.StatusBadPointer)) || abi.IsStatus(-abi.MinReplyCap-1) || abi.IsStatus(0) {
		t.Fatal("IsStatus")
	}
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	buf := make([]byte, 0, 1024)
	resp := abi.DecideResponse{Decision: sdk.Decision{Allowed: true, Granted: 1, Limit: 10, Remaining: 9, Window: time.Second, Reset: time.Second}}
	req := abi.DecideRequest{ConfigID: 1, Request: sdk.Request{Subject: "s", Hits: 1}}
	reply := sdk.IntsReply(1, 1, 10, 9, 1000000, 0)
	var dec abi.DecideResponse
	n := testing.AllocsPerRun(100, func() {
		b := resp.Append(buf[:0])
		b = req.Append(b)
		buf = abi.AppendReply(b, reply)
		_ = dec.Decode(resp.Append(buf[:0]))
	})
	if n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func FuzzDecoders(f *testing.F) {
	info := testInfo()
	f.Add(abi.AppendInfo(nil, &info, true))
	cr, _ := (&abi.ConfigureRequest{ConfigID: 1, Config: testConfig()}).Append(nil)
	f.Add(cr)
	f.Add(abi.AppendReply(nil, sdk.NewReply([]any{int64(1), "x", []any{nil}})))
	er, _ := (&abi.EvalRequest{Script: "s", Keys: []string{"k"}, Args: []any{1, "a", 0.5}}).Append(nil)
	f.Add(er)
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = abi.DecodeInfo(b)
		_, _ = abi.DecodeReply(b)
		_, _ = abi.DecodeValue(b)
		var c abi.ConfigureRequest
		_ = c.Decode(b)
		var d abi.DecideRequest
		_ = d.Decode(b)
		var r abi.DecideResponse
		_ = r.Decode(b)
		var e abi.EvalRequest
		_ = e.Decode(b)
	})
}

// A reply of integers decodes with one allocation: its array.
func TestDecodingAnIntegerReplyAllocatesOnlyTheArray(t *testing.T) {
	b := abi.AppendReply(nil, sdk.IntsReply(1, 1, 1<<40, 1<<40-1, 3_600_000_000, 0))
	if n := testing.AllocsPerRun(100, func() {
		if _, err := abi.DecodeReply(b); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Fatalf("%v allocations, want 1", n)
	}
}

// FuzzDecodersAgreeWithProtobuf decodes the same bytes with the hand-written
// codec and with the generated one: a DecideRequest protobuf-go accepts is
// accepted with the same values, and a Reply (re-encoded canonically, since
// protobuf merges repeated message fields where the codec keeps the last)
// decodes to the same value.
func FuzzDecodersAgreeWithProtobuf(f *testing.F) {
	f.Add((&abi.DecideRequest{ConfigID: 300, Request: sdk.Request{Subject: "s", Hits: -5, DedupID: "d",
		BestEffort: true, Queue: true, Attrs: map[string]string{"a": "b"}}}).Append(nil))
	f.Add(abi.AppendReply(nil, sdk.IntsReply(1, 1, 1<<40, -3, 200)))
	f.Add(abi.AppendReply(nil, sdk.NewReply([]any{int64(1), "x", []any{nil, int64(-1)}})))
	f.Add(abi.AppendReply(nil, sdk.StringReply(strings.Repeat("y", 200))))
	f.Fuzz(func(t *testing.T, b []byte) {
		var want abipb.DecideRequest
		if proto.Unmarshal(b, &want) == nil {
			var got abi.DecideRequest
			if err := got.Decode(b); err != nil {
				t.Fatalf("DecideRequest: protobuf-go accepts %x, the codec says %v", b, err)
			}
			r := got.Request
			if got.ConfigID != want.GetConfigId() || r.Subject != string(want.GetSubject()) || r.Hits != want.GetHits() ||
				r.DedupID != string(want.GetDedupId()) || r.BestEffort != want.GetBestEffort() || !maps.Equal(r.Attrs, want.GetAttrs()) {
				t.Fatalf("DecideRequest %x: codec %+v, protobuf-go %v", b, got, &want)
			}
		}
		var reply abipb.Reply
		if proto.Unmarshal(b, &reply) != nil || !decodable(&reply, 0) {
			return
		}
		canonical, err := proto.MarshalOptions{Deterministic: true}.Marshal(&reply)
		if err != nil {
			t.Fatal(err)
		}
		got, err := abi.DecodeReply(canonical)
		if err != nil {
			t.Fatalf("Reply %x: %v", canonical, err)
		}
		if want := replyOf(&reply); !got.Equal(want) {
			t.Fatalf("Reply %x: codec %v, protobuf-go %v", canonical, got.Value(), want.Value())
		}
	})
}

// decodable reports whether the codec should decode r as protobuf-go
// does: no Error anywhere (the codec fails the whole reply on one) and no
// deeper nesting than the codec's limit of 64.
func decodable(r *abipb.Reply, depth int) bool {
	if r.GetError() != nil || depth > 64 {
		return false
	}
	for _, e := range r.GetArrayValue().GetElems() {
		if !decodable(e, depth+1) {
			return false
		}
	}
	return true
}

// replyOf converts a generated Reply to an sdk.Reply.
func replyOf(r *abipb.Reply) sdk.Reply {
	switch k := r.GetKind().(type) {
	case *abipb.Reply_IntValue:
		return sdk.IntReply(k.IntValue)
	case *abipb.Reply_StringValue:
		return sdk.StringReply(string(k.StringValue))
	case *abipb.Reply_ArrayValue:
		arr := make([]sdk.Reply, 0, len(k.ArrayValue.GetElems()))
		for _, e := range k.ArrayValue.GetElems() {
			arr = append(arr, replyOf(e))
		}
		return sdk.ArrayReply(arr)
	}
	return sdk.Reply{}
}

func TestStepMessagesRoundTripAndSchema(t *testing.T) {
	// The first step is a DecideRequest: a module without ruled_step
	// would read it as one.
	first := abi.StepRequest{DecideRequest: abi.DecideRequest{ConfigID: 3, Request: sdk.Request{Subject: "s", Hits: 2, Queue: true}}}
	var dr abi.DecideRequest
	if err := dr.Decode(first.Append(nil)); err != nil || !reflect.DeepEqual(dr, first.DecideRequest) {
		t.Fatalf("as a DecideRequest: %+v, %v", dr, err)
	}
	resume := first
	resume.Resume, resume.Script, resume.State = true, "decide", []byte{1, 2}
	resume.Reply = sdk.IntsReply(1, 2, 3)
	var got abi.StepRequest
	if err := got.Decode(resume.Append(nil)); err != nil || !got.Resume || got.Script != "decide" ||
		!reflect.DeepEqual(got.State, []byte{1, 2}) || !got.Reply.Equal(resume.Reply) || got.ConfigID != 3 || got.Request.Hits != 2 || !got.Request.Queue {
		t.Fatalf("resume round trip: %+v, %v", got, err)
	}
	var pbReq abipb.StepRequest
	if err := proto.Unmarshal(resume.Append(nil), &pbReq); err != nil || !pbReq.Resume || pbReq.Script != "decide" ||
		len(pbReq.Reply.GetArrayValue().GetElems()) != 3 || pbReq.ConfigId != 3 || !pbReq.Queue {
		t.Fatalf("generated code reads %v, %v", &pbReq, err)
	}

	call := abi.StepResponse{Call: abi.EvalRequest{Script: "decide", Keys: []string{"k"}, Args: []any{int64(7), "x"}},
		Decides: true, Window: time.Minute, State: []byte("st")}
	b, err := call.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	var resp abi.StepResponse
	if err := resp.Decode(b); err != nil || resp.Call.Script != "decide" || !reflect.DeepEqual(resp.Call.Keys, []string{"k"}) ||
		!reflect.DeepEqual(resp.Call.Args, []any{int64(7), "x"}) || !resp.Decides || resp.Window != time.Minute || string(resp.State) != "st" {
		t.Fatalf("call round trip: %+v, %v", resp, err)
	}
	var pbResp abipb.StepResponse
	if err := proto.Unmarshal(b, &pbResp); err != nil || pbResp.Call.GetScript() != "decide" || !pbResp.Decides || pbResp.WindowUs != 60e6 {
		t.Fatalf("generated code reads %v, %v", &pbResp, err)
	}
	// A final step is a DecideResponse, and decoding it clears the call.
	final := abi.StepResponse{DecideResponse: abi.DecideResponse{Decision: sdk.Decision{Allowed: true, Limit: 5}}}
	if b, err = final.Append(nil); err != nil {
		t.Fatal(err)
	}
	if err := resp.Decode(b); err != nil || resp.Call.Script != "" || resp.Decides || !resp.Decision.Allowed || resp.Decision.Limit != 5 {
		t.Fatalf("final round trip: %+v, %v", resp, err)
	}
	if _, err := (&abi.StepResponse{Call: abi.EvalRequest{Script: "x", Args: []any{struct{}{}}}}).Append(nil); err == nil {
		t.Fatal("an argument that cannot cross was encoded")
	}
}
