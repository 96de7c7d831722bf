package pluginrpc

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
	"github.com/ruled-dev/ruled/sdk/abi/abipb"
)

// maxDepth bounds the nesting of replies, as sdk/abi does.
const maxDepth = 64

// InfoToPB converts a plugin's Info.
func InfoToPB(info *sdk.Info) *abipb.Info {
	out := &abipb.Info{Name: info.Name, Version: info.Version, Scripts: make([]*abipb.Script, len(info.Scripts))}
	for i, s := range info.Scripts {
		out.Scripts[i] = &abipb.Script{Name: s.Name, Source: s.Source, Commands: s.Commands}
		if s.Returns != nil {
			out.Scripts[i].Returns = s.Returns.Names()
		}
	}
	if t := info.Traits; t != (sdk.Traits{}) {
		out.Traits = &abipb.Traits{FirmDenials: t.FirmDenials, Leasable: t.Leasable, Refunds: t.Refunds, Releases: t.Releases}
	}
	return out
}

// InfoFromPB converts an Info message.
func InfoFromPB(m *abipb.Info) sdk.Info {
	info := sdk.Info{Name: m.GetName(), Version: m.GetVersion(), Traits: sdk.Traits{
		FirmDenials: m.GetTraits().GetFirmDenials(), Leasable: m.GetTraits().GetLeasable(), Refunds: m.GetTraits().GetRefunds(),
		Releases: m.GetTraits().GetReleases(),
	}}
	for _, s := range m.GetScripts() {
		script := sdk.Script{Name: s.GetName(), Source: s.GetSource(), Commands: s.GetCommands()}
		if len(s.GetReturns()) > 0 {
			script.Returns = sdk.NewShape(s.GetReturns()...)
		}
		info.Scripts = append(info.Scripts, script)
	}
	return info
}

// DecideErrorToPB turns Decide's error into a response, as a Wasm guest
// answers it (abi.DecideError).
func DecideErrorToPB(err error) *abipb.DecideResponse {
	msg, bad := abi.DecideError(err)
	return &abipb.DecideResponse{Error: msg, BadRequest: bad}
}

// ConfigureToPB encodes a rule's raw config under id, with sdk/abi's codec
// (so that the plugin decodes the same Go types a Wasm guest would).
func ConfigureToPB(id uint64, raw map[string]any) (*abipb.ConfigureRequest, error) {
	b, err := (&abi.ConfigureRequest{ConfigID: id, Config: raw}).Append(nil)
	if err != nil {
		return nil, err
	}
	m := &abipb.ConfigureRequest{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("pluginrpc: config: %w", err)
	}
	return m, nil
}

// ConfigureFromPB decodes a ConfigureRequest message with sdk/abi's codec.
func ConfigureFromPB(m *abipb.ConfigureRequest) (abi.ConfigureRequest, error) {
	var req abi.ConfigureRequest
	b, err := proto.Marshal(m)
	if err != nil {
		return req, fmt.Errorf("pluginrpc: config: %w", err)
	}
	return req, req.Decode(b)
}

// ConfigureResponseToPB converts the answer to a Configure, its template
// encoded with sdk/abi's codec (request fields included).
func ConfigureResponseToPB(resp *abi.ConfigureResponse) (*abipb.ConfigureResponse, error) {
	b, err := resp.Append(nil)
	if err != nil {
		return nil, fmt.Errorf("pluginrpc: configure response: %w", err)
	}
	m := &abipb.ConfigureResponse{}
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("pluginrpc: configure response: %w", err)
	}
	return m, nil
}

// ConfigureResponseFromPB decodes the answer to a Configure with sdk/abi's
// codec, which refuses a malformed template.
func ConfigureResponseFromPB(m *abipb.ConfigureResponse) (abi.ConfigureResponse, error) {
	var resp abi.ConfigureResponse
	b, err := proto.Marshal(m)
	if err != nil {
		return resp, fmt.Errorf("pluginrpc: configure response: %w", err)
	}
	return resp, resp.Decode(b)
}

// ConfigErrors returns the messages of the leaves of an errors.Join tree,
// one problem each, as ConfigureResponse.errors carries them.
func ConfigErrors(err error, out []string) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if e != nil {
				out = ConfigErrors(e, out)
			}
		}
		return out
	}
	return append(out, err.Error())
}

// RequestToPB converts a request to decide under config id.
func RequestToPB(id uint64, r *sdk.Request) *abipb.DecideRequest {
	m := &abipb.DecideRequest{ConfigId: id, Subject: []byte(r.Subject), Hits: r.Hits, BestEffort: r.BestEffort, Attrs: r.Attrs, Queue: r.Queue}
	if r.DedupID != "" {
		m.DedupId = []byte(r.DedupID)
	}
	return m
}

// RequestFromPB converts a DecideRequest message.
func RequestFromPB(m *abipb.DecideRequest) sdk.Request {
	return sdk.Request{Subject: string(m.GetSubject()), Hits: m.GetHits(), DedupID: string(m.GetDedupId()),
		BestEffort: m.GetBestEffort(), Attrs: m.GetAttrs(), Queue: m.GetQueue()}
}

// DecisionToPB converts a decision; durations cross in whole microseconds,
// as in the Wasm ABI.
func DecisionToPB(d *sdk.Decision) *abipb.Decision {
	return &abipb.Decision{Allowed: d.Allowed, Granted: d.Granted, Limit: d.Limit, Remaining: d.Remaining,
		WindowUs: d.Window.Microseconds(), ResetUs: d.Reset.Microseconds(),
		RetryAfterUs: d.RetryAfter.Microseconds(), DelayUs: d.Delay.Microseconds()}
}

// DecisionFromPB converts a Decision message.
func DecisionFromPB(m *abipb.Decision) sdk.Decision {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return sdk.Decision{Allowed: m.GetAllowed(), Granted: m.GetGranted(), Limit: m.GetLimit(), Remaining: m.GetRemaining(),
		Window: us(m.GetWindowUs()), Reset: us(m.GetResetUs()), RetryAfter: us(m.GetRetryAfterUs()), Delay: us(m.GetDelayUs())}
}

// ArgsToPB converts Eval arguments as abi.AppendArg does: nil, strings,
// []byte, bools, integers, floats, time.Duration, time.Time (RFC 3339 text
// with nanoseconds) and encoding.BinaryMarshaler. Strings travel as bytes.
func ArgsToPB(args []any) ([]*abipb.Value, error) {
	out := make([]*abipb.Value, len(args))
	for i, a := range args {
		v, err := ArgToPB(a)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i, err)
		}
		out[i] = v
	}
	return out, nil
}

// ArgToPB converts one Eval argument (see ArgsToPB).
func ArgToPB(a any) (*abipb.Value, error) {
	switch t := a.(type) {
	case nil:
		return &abipb.Value{Kind: &abipb.Value_NullValue{NullValue: true}}, nil
	case string:
		return bytesValue([]byte(t)), nil
	case []byte:
		return bytesValue(t), nil
	case bool:
		return &abipb.Value{Kind: &abipb.Value_BoolValue{BoolValue: t}}, nil
	case int:
		return intValue(int64(t)), nil
	case int8:
		return intValue(int64(t)), nil
	case int16:
		return intValue(int64(t)), nil
	case int32:
		return intValue(int64(t)), nil
	case int64:
		return intValue(t), nil
	case uint:
		return uintValue(uint64(t)), nil
	case uint8:
		return uintValue(uint64(t)), nil
	case uint16:
		return uintValue(uint64(t)), nil
	case uint32:
		return uintValue(uint64(t)), nil
	case uint64:
		return uintValue(t), nil
	case float32:
		return &abipb.Value{Kind: &abipb.Value_FloatValue{FloatValue: float64(t)}}, nil
	case float64:
		return &abipb.Value{Kind: &abipb.Value_FloatValue{FloatValue: t}}, nil
	case time.Duration:
		return &abipb.Value{Kind: &abipb.Value_DurationNs{DurationNs: int64(t)}}, nil
	case time.Time:
		return bytesValue([]byte(t.Format(time.RFC3339Nano))), nil
	case interface{ MarshalBinary() ([]byte, error) }:
		data, err := t.MarshalBinary()
		if err != nil {
			return nil, fmt.Errorf("pluginrpc: argument: %w", err)
		}
		return bytesValue(data), nil
	}
	return nil, fmt.Errorf("%w %T", abi.ErrArgType, a)
}

func bytesValue(b []byte) *abipb.Value {
	if b == nil {
		b = []byte{}
	}
	return &abipb.Value{Kind: &abipb.Value_BytesValue{BytesValue: b}}
}

func intValue(v int64) *abipb.Value { return &abipb.Value{Kind: &abipb.Value_IntValue{IntValue: v}} }

func uintValue(v uint64) *abipb.Value {
	if v <= math.MaxInt64 {
		return intValue(int64(v))
	}
	return &abipb.Value{Kind: &abipb.Value_UintValue{UintValue: v}}
}

// ArgsFromPB converts Eval arguments as abi.DecodeArg does: bytes and
// strings become string, integers int64, unsigned integers above the int64
// range uint64, floats float64, durations time.Duration; lists and maps are
// refused.
func ArgsFromPB(vs []*abipb.Value) ([]any, error) {
	out := make([]any, len(vs))
	for i, v := range vs {
		switch k := v.GetKind().(type) {
		case nil, *abipb.Value_NullValue:
			out[i] = nil
		case *abipb.Value_BytesValue:
			out[i] = string(k.BytesValue)
		case *abipb.Value_StringValue:
			out[i] = k.StringValue
		case *abipb.Value_IntValue:
			out[i] = k.IntValue
		case *abipb.Value_UintValue:
			out[i] = k.UintValue
		case *abipb.Value_FloatValue:
			out[i] = k.FloatValue
		case *abipb.Value_BoolValue:
			out[i] = k.BoolValue
		case *abipb.Value_DurationNs:
			out[i] = time.Duration(k.DurationNs)
		default:
			return nil, fmt.Errorf("argument %d: %w: a list or map", i, abi.ErrArgType)
		}
	}
	return out, nil
}

// ReplyToPB converts a script's reply.
func ReplyToPB(r sdk.Reply) *abipb.Reply {
	switch r.Kind() {
	case sdk.ReplyInt:
		n, _ := r.Int64()
		return &abipb.Reply{Kind: &abipb.Reply_IntValue{IntValue: n}}
	case sdk.ReplyString:
		str, _ := r.Str()
		return &abipb.Reply{Kind: &abipb.Reply_StringValue{StringValue: []byte(str)}}
	case sdk.ReplyArray:
		elems := make([]*abipb.Reply, r.Len())
		for i := range elems {
			elems[i] = ReplyToPB(r.Index(i))
		}
		return &abipb.Reply{Kind: &abipb.Reply_ArrayValue{ArrayValue: &abipb.ReplyArray{Elems: elems}}}
	default:
		return &abipb.Reply{Kind: &abipb.Reply_NullValue{NullValue: true}}
	}
}

// ReplyErrorToPB converts a failed host call into a Reply carrying it.
func ReplyErrorToPB(e *abi.Error) *abipb.Reply {
	return &abipb.Reply{Kind: &abipb.Reply_Error{Error: &abipb.Error{Class: e.Class, Message: e.Message}}}
}

// ReplyFromPB converts a Reply message. A reply that carries an error
// returns it as an *abi.Error, as abi.DecodeReply does.
func ReplyFromPB(m *abipb.Reply) (sdk.Reply, error) { return replyFromPB(m, 0) }

func replyFromPB(m *abipb.Reply, depth int) (sdk.Reply, error) {
	if depth > maxDepth {
		return sdk.Reply{}, errors.New("pluginrpc: Reply: nested too deeply")
	}
	switch k := m.GetKind().(type) {
	case *abipb.Reply_IntValue:
		return sdk.IntReply(k.IntValue), nil
	case *abipb.Reply_StringValue:
		return sdk.StringReply(string(k.StringValue)), nil
	case *abipb.Reply_ArrayValue:
		elems := k.ArrayValue.GetElems()
		arr := make([]sdk.Reply, len(elems))
		for i, e := range elems {
			r, err := replyFromPB(e, depth+1)
			if err != nil {
				return sdk.Reply{}, err
			}
			arr[i] = r
		}
		return sdk.ArrayReply(arr), nil
	case *abipb.Reply_Error:
		return sdk.Reply{}, &abi.Error{Class: k.Error.GetClass(), Message: k.Error.GetMessage()}
	default:
		return sdk.Reply{}, nil
	}
}
