package abi

import (
	"errors"
	"fmt"
	"math"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/ruled-dev/ruled/sdk"
)

// InitRequest is the argument of ExportInit.
type InitRequest struct {
	// ABIVersion is the ABI the host speaks (Version).
	ABIVersion uint32
}

// Append appends m encoded.
func (m *InitRequest) Append(b []byte) []byte { return appendUint(b, 1, uint64(m.ABIVersion)) }

// Decode decodes b into m.
func (m *InitRequest) Decode(b []byte) error {
	*m = InitRequest{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: InitRequest: %w", err)
		}
		b = rest
		if f.num == 1 && f.isVarint() {
			m.ABIVersion = uint32(f.u)
		}
	}
	return nil
}

// AppendInfo appends info encoded as an Info message; steps declares that
// the module decides in steps (ExportStep).
func AppendInfo(b []byte, info *sdk.Info, steps bool) []byte {
	b = appendString(b, 1, info.Name)
	b = appendString(b, 2, info.Version)
	for i := range info.Scripts {
		s := &info.Scripts[i]
		var mark int
		b, mark = beginNested(b, 3)
		b = appendString(b, 1, s.Name)
		b = appendString(b, 2, s.Source)
		for _, c := range s.Commands {
			b = appendStringAlways(b, 3, c)
		}
		if s.Returns != nil {
			for _, n := range s.Returns.Names() {
				b = appendStringAlways(b, 4, n)
			}
		}
		b = endNested(b, mark)
	}
	if t := info.Traits; t != (sdk.Traits{}) {
		var mark int
		b, mark = beginNested(b, 4)
		b = appendBool(b, 1, t.FirmDenials)
		b = appendBool(b, 2, t.Leasable)
		b = appendBool(b, 3, t.Refunds)
		b = appendBool(b, 4, t.Releases)
		b = endNested(b, mark)
	}
	return appendBool(b, 5, steps)
}

// DecodeInfo decodes an Info message, and whether the module decides in
// steps.
func DecodeInfo(b []byte) (info sdk.Info, steps bool, err error) {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return sdk.Info{}, false, fmt.Errorf("abi: Info: %w", err)
		}
		b = rest
		switch {
		case f.num == 1 && f.isBytes():
			info.Name = string(f.bytes)
		case f.num == 2 && f.isBytes():
			info.Version = string(f.bytes)
		case f.num == 3 && f.isBytes():
			s, err := decodeScript(f.bytes)
			if err != nil {
				return sdk.Info{}, false, err
			}
			info.Scripts = append(info.Scripts, s)
		case f.num == 4 && f.isBytes():
			t, err := decodeTraits(f.bytes)
			if err != nil {
				return sdk.Info{}, false, err
			}
			info.Traits = t
		case f.num == 5 && f.isVarint():
			steps = f.u != 0
		}
	}
	return info, steps, nil
}

func decodeTraits(b []byte) (sdk.Traits, error) {
	var t sdk.Traits
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return sdk.Traits{}, fmt.Errorf("abi: Traits: %w", err)
		}
		b = rest
		if !f.isVarint() {
			continue
		}
		switch f.num {
		case 1:
			t.FirmDenials = f.u != 0
		case 2:
			t.Leasable = f.u != 0
		case 3:
			t.Refunds = f.u != 0
		case 4:
			t.Releases = f.u != 0
		}
	}
	return t, nil
}

func decodeScript(b []byte) (sdk.Script, error) {
	var s sdk.Script
	var returns []string
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return sdk.Script{}, fmt.Errorf("abi: Script: %w", err)
		}
		b = rest
		if !f.isBytes() {
			continue
		}
		switch f.num {
		case 1:
			s.Name = string(f.bytes)
		case 2:
			s.Source = string(f.bytes)
		case 3:
			s.Commands = append(s.Commands, string(f.bytes))
		case 4:
			returns = append(returns, string(f.bytes))
		}
	}
	if returns != nil {
		s.Returns = sdk.NewShape(returns...)
	}
	return s, nil
}

// ConfigureRequest is the argument of ExportConfigure.
type ConfigureRequest struct {
	// ConfigID names the config in later DecideRequests; never 0.
	ConfigID uint64
	// Config is the rule's raw config (see AppendValue for the types).
	Config map[string]any
}

// Append appends m encoded. It fails on a config value AppendValue cannot
// encode.
func (m *ConfigureRequest) Append(b []byte) ([]byte, error) {
	b = appendUint(b, 1, m.ConfigID)
	if len(m.Config) == 0 {
		return b, nil
	}
	b, mark := beginNested(b, 2)
	b, err := appendValueMapFields(b, m.Config, 1)
	if err != nil {
		return b, fmt.Errorf("abi: config: %w", err)
	}
	return endNested(b, mark), nil
}

// Decode decodes b into m. An absent config decodes as an empty map.
func (m *ConfigureRequest) Decode(b []byte) error {
	*m = ConfigureRequest{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: ConfigureRequest: %w", err)
		}
		b = rest
		switch {
		case f.num == 1 && f.isVarint():
			m.ConfigID = f.u
		case f.num == 2 && f.isBytes():
			if m.Config, err = decodeValueMap(f.bytes, 1); err != nil {
				return fmt.Errorf("abi: ConfigureRequest: %w", err)
			}
		}
	}
	if m.Config == nil {
		m.Config = map[string]any{}
	}
	return nil
}

// ConfigureResponse is the answer of ExportConfigure.
type ConfigureResponse struct {
	// Errors lists every problem with the config, one message each (the
	// leaves of an errors.Join tree); empty when the config is valid.
	Errors []string
	// Template is the valid config's template (sdk.Templater), nil when
	// it has none.
	Template *sdk.Step
}

// Append appends m encoded. It fails on a template argument that cannot
// cross the ABI (AppendArg).
func (m *ConfigureResponse) Append(b []byte) ([]byte, error) {
	for _, e := range m.Errors {
		b = appendStringAlways(b, 1, e)
	}
	if m.Template != nil {
		var t StepResponse
		t.SetStep(*m.Template, nil)
		b, mark := beginNested(b, 2)
		b, err := t.Append(b)
		if err != nil {
			return b, fmt.Errorf("template: %w", err)
		}
		return endNested(b, mark), nil
	}
	return b, nil
}

// Decode decodes b into m. A template that sdk.CheckTemplate refuses is an
// error.
func (m *ConfigureResponse) Decode(b []byte) error {
	*m = ConfigureResponse{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: ConfigureResponse: %w", err)
		}
		b = rest
		switch {
		case f.num == 1 && f.isBytes():
			m.Errors = append(m.Errors, string(f.bytes))
		case f.num == 2 && f.isBytes():
			var t StepResponse
			if err := t.decode(f.bytes, true); err != nil {
				return fmt.Errorf("abi: ConfigureResponse template: %w", err)
			}
			s := t.Step()
			if err := sdk.CheckTemplate(s); err != nil {
				return fmt.Errorf("abi: ConfigureResponse: %w", err)
			}
			m.Template = &s
		}
	}
	return nil
}

// DecideRequest is the argument of ExportDecide.
type DecideRequest struct {
	// ConfigID names a config the guest accepted in ExportConfigure.
	ConfigID uint64
	// Request is the request to decide.
	Request sdk.Request
}

// Append appends m encoded.
func (m *DecideRequest) Append(b []byte) []byte {
	r := &m.Request
	b = appendUint(b, 1, m.ConfigID)
	b = appendString(b, 2, r.Subject)
	b = appendSint(b, 3, r.Hits)
	b = appendString(b, 4, r.DedupID)
	b = appendBool(b, 5, r.BestEffort)
	b = appendBool(b, 11, r.Queue)
	for k, v := range r.Attrs {
		var mark int
		b, mark = beginNested(b, 6)
		b = appendString(b, 1, k)
		b = appendString(b, 2, v)
		b = endNested(b, mark)
	}
	return b
}

// Decode decodes b into m. Attrs is nil when the request has none.
func (m *DecideRequest) Decode(b []byte) error {
	*m = DecideRequest{}
	r := &m.Request
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: DecideRequest: %w", err)
		}
		b = rest
		switch {
		case f.num == 1 && f.isVarint():
			m.ConfigID = f.u
		case f.num == 2 && f.isBytes():
			r.Subject = string(f.bytes)
		case f.num == 3 && f.isVarint():
			r.Hits = f.sint()
		case f.num == 4 && f.isBytes():
			r.DedupID = string(f.bytes)
		case f.num == 5 && f.isVarint():
			r.BestEffort = f.u != 0
		case f.num == 11 && f.isVarint():
			r.Queue = f.u != 0
		case f.num == 6 && f.isBytes():
			k, v, err := decodeStringPair(f.bytes)
			if err != nil {
				return fmt.Errorf("abi: DecideRequest attrs: %w", err)
			}
			if r.Attrs == nil {
				r.Attrs = map[string]string{}
			}
			r.Attrs[k] = v
		}
	}
	return nil
}

func decodeStringPair(b []byte) (k, v string, err error) {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return "", "", err
		}
		b = rest
		switch {
		case f.num == 1 && f.isBytes():
			k = string(f.bytes)
		case f.num == 2 && f.isBytes():
			v = string(f.bytes)
		}
	}
	return k, v, nil
}

// DecideResponse is the answer of ExportDecide.
type DecideResponse struct {
	// Decision is the plugin's decision; durations cross the boundary in
	// whole microseconds (shorter parts are truncated).
	Decision sdk.Decision
	// Error is set when the plugin could not decide.
	Error string
	// BadRequest marks Error as a refusal of the request as bad input
	// (sdk.BadRequestError).
	BadRequest bool
}

// DecideError returns what a DecideResponse carries for Decide's error:
// the message, and whether it refuses the request as bad input (an
// sdk.BadRequestError, wrapped or not, whose message alone crosses). The
// message is never empty, as an empty one would cross as no error at all:
// a zero decision.
func DecideError(err error) (msg string, badRequest bool) {
	var bad *sdk.BadRequestError
	if errors.As(err, &bad) {
		msg, badRequest = bad.Message, true
	} else {
		msg = err.Error()
	}
	if msg == "" {
		msg = fmt.Sprintf("Decide failed with an empty %T", err)
	}
	return msg, badRequest
}

// AnsweredError is DecideError's inverse, for a host: the error an answer
// (DecideResponse or StepResponse) carries. It is nil when the answer
// carries none, an *sdk.BadRequestError for a refusal of bad input, and
// otherwise an error reading "<driver> plugin <plugin>: <msg>" that unwraps
// to cause (the capability error the plugin met in the same call, if any),
// so that the engine classifies it as it would a native plugin's.
func AnsweredError(driver, plugin, msg string, badRequest bool, cause error) error {
	switch {
	case badRequest:
		return &sdk.BadRequestError{Message: msg}
	case msg == "":
		return nil
	}
	return &answeredError{msg: driver + " plugin " + plugin + ": " + msg, cause: cause}
}

// answeredError is a plugin's failure to decide, as its answer carried it.
type answeredError struct {
	msg   string
	cause error
}

func (e *answeredError) Error() string { return e.msg }
func (e *answeredError) Unwrap() error { return e.cause }

// Append appends m encoded.
func (m *DecideResponse) Append(b []byte) []byte {
	d := &m.Decision
	b, mark := beginNested(b, 1)
	b = appendBool(b, 1, d.Allowed)
	b = appendSint(b, 2, d.Granted)
	b = appendSint(b, 3, d.Limit)
	b = appendSint(b, 4, d.Remaining)
	b = appendSint(b, 5, d.Window.Microseconds())
	b = appendSint(b, 6, d.Reset.Microseconds())
	b = appendSint(b, 7, d.RetryAfter.Microseconds())
	b = appendSint(b, 8, d.Delay.Microseconds())
	b = endNested(b, mark)
	b = appendString(b, 2, m.Error)
	return appendBool(b, 3, m.BadRequest)
}

// Decode decodes b into m.
func (m *DecideResponse) Decode(b []byte) error {
	*m = DecideResponse{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: DecideResponse: %w", err)
		}
		b = rest
		switch {
		case f.num == 1 && f.isBytes():
			if err := decodeDecision(f.bytes, &m.Decision); err != nil {
				return err
			}
		case f.num == 2 && f.isBytes():
			m.Error = string(f.bytes)
		case f.num == 3 && f.isVarint():
			m.BadRequest = f.u != 0
		}
	}
	return nil
}

func decodeDecision(b []byte, d *sdk.Decision) error {
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: Decision: %w", err)
		}
		b = rest
		if !f.isVarint() {
			continue
		}
		switch f.num {
		case 1:
			d.Allowed = f.u != 0
		case 2:
			d.Granted = f.sint()
		case 3:
			d.Limit = f.sint()
		case 4:
			d.Remaining = f.sint()
		case 5:
			d.Window = us(f.sint())
		case 6:
			d.Reset = us(f.sint())
		case 7:
			d.RetryAfter = us(f.sint())
		case 8:
			d.Delay = us(f.sint())
		}
	}
	return nil
}

// EvalRequest is what a guest passes to ImportRedisEval.
type EvalRequest struct {
	// Script names a script declared in Info.
	Script string
	// Keys are relative key names.
	Keys []string
	// Args are the script's arguments: scalars only (see AppendArg).
	Args []any
}

// ErrArgType reports an Eval argument of a type that cannot cross the ABI.
var ErrArgType = errors.New("abi: unsupported argument type")

// Append appends m encoded. Args are encoded with AppendArg.
func (m *EvalRequest) Append(b []byte) ([]byte, error) {
	b = appendString(b, 1, m.Script)
	for _, k := range m.Keys {
		b = appendStringAlways(b, 2, k)
	}
	for i, a := range m.Args {
		var mark int
		var err error
		b, mark = beginNested(b, 3)
		if b, err = AppendArg(b, a); err != nil {
			return b, fmt.Errorf("argument %d: %w", i, err)
		}
		b = endNested(b, mark)
	}
	return b, nil
}

// AppendArg appends an Eval argument encoded as a Value. It accepts what
// go-redis accepts as a script argument and sends it the same way: nil,
// strings, []byte, bools, integers, floats, time.Duration, time.Time (as
// RFC 3339 text with nanoseconds) and encoding.BinaryMarshaler. Strings
// travel as bytes_value, since they need not be UTF-8. An sdk.Field (the
// argument of a template) travels as request_field.
func AppendArg(b []byte, a any) ([]byte, error) {
	switch t := a.(type) {
	case sdk.Field:
		return appendTagVarint(b, varintTag(valueField), uint64(t)), nil
	case int64:
		return appendIntValue(b, t), nil
	case string:
		return appendStringAlways(b, valueBytes, t), nil
	case int:
		return appendIntValue(b, int64(t)), nil
	case time.Time:
		b = appendTag(b, valueBytes, protowire.BytesType)
		return protowire.AppendString(b, t.Format(time.RFC3339Nano)), nil
	case nil, bool, int8, int16, int32, uint, uint8, uint16, uint32, uint64, float32, float64, []byte, time.Duration:
		return appendValue(b, a, 0)
	case interface{ MarshalBinary() ([]byte, error) }:
		data, err := t.MarshalBinary()
		if err != nil {
			return b, fmt.Errorf("abi: argument: %w", err)
		}
		b = appendTag(b, valueBytes, protowire.BytesType)
		return protowire.AppendBytes(b, data), nil
	}
	return b, fmt.Errorf("%w %T", ErrArgType, a)
}

// Decode decodes b into m, reusing m's slices. Arguments decode as
// DecodeArg does; a list or map argument is an error.
func (m *EvalRequest) Decode(b []byte) error { return m.decode(b, false) }

// decode decodes b into m; fields allows request fields among the
// arguments (a template's).
func (m *EvalRequest) decode(b []byte, fields bool) error {
	m.Script, m.Keys, m.Args = "", m.Keys[:0], m.Args[:0]
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: EvalRequest: %w", err)
		}
		b = rest
		if !f.isBytes() {
			continue
		}
		switch f.num {
		case 1:
			m.Script = string(f.bytes)
		case 2:
			m.Keys = append(m.Keys, string(f.bytes))
		case 3:
			a, err := decodeArg(f.bytes, fields)
			if err != nil {
				return fmt.Errorf("abi: EvalRequest argument %d: %w", len(m.Args), err)
			}
			m.Args = append(m.Args, a)
		}
	}
	return nil
}

// DecodeArg decodes an Eval argument: like DecodeValue, except that bytes
// become a string (Redis sees the same bytes) and that lists, maps and
// request fields (ErrFieldOutsideTemplate) are refused.
func DecodeArg(b []byte) (any, error) { return decodeArg(b, false) }

// ErrFieldOutsideTemplate reports a request_field argument where only a
// value may be: anywhere but in a template's call.
var ErrFieldOutsideTemplate = errors.New("abi: a request field outside a template")

// decodeArg is DecodeArg; fields allows request fields, which decode to a
// valid sdk.Field.
func decodeArg(b []byte, fields bool) (any, error) {
	var v any
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return nil, err
		}
		b = rest
		switch {
		case f.num == valueBytes && f.isBytes(), f.num == valueString && f.isBytes():
			v = string(f.bytes)
		case f.num == valueNull && f.isVarint():
			v = nil
		case f.num == valueInt && f.isVarint():
			v = f.sint()
		case f.num == valueUint && f.isVarint():
			v = f.u
		case f.num == valueFloat && f.typ == protowire.Fixed64Type:
			v = math.Float64frombits(f.u)
		case f.num == valueBool && f.isVarint():
			v = f.u != 0
		case f.num == valueDuration && f.isVarint():
			v = time.Duration(f.sint())
		case f.num == valueList, f.num == valueMap:
			return nil, fmt.Errorf("%w: a list or map", ErrArgType)
		case f.num == valueField && f.isVarint():
			if !fields {
				return nil, ErrFieldOutsideTemplate
			}
			if fv := sdk.Field(f.u); f.u <= math.MaxUint8 && fv.Valid() {
				v = fv
			} else {
				return nil, fmt.Errorf("abi: unknown request field %d", f.u)
			}
		}
	}
	return v, nil
}

// StepRequest is the argument of ExportStep: a DecideRequest (the same
// fields), and for a resumed step the step and its call's reply.
type StepRequest struct {
	DecideRequest
	// Resume is false for the first step (sdk.Stepper.Start), true after
	// a call (Resume).
	Resume bool
	// Script is the script the resumed step ran.
	Script string
	// State is the resumed step's State.
	State []byte
	// Reply is the call's reply.
	Reply sdk.Reply
}

// StartStep is the StepRequest of a decision's first step (sdk.Steps'
// Start) under the config named configID.
func StartStep(configID uint64, r sdk.Request) StepRequest {
	return StepRequest{DecideRequest: DecideRequest{ConfigID: configID, Request: r}}
}

// ResumeStep is the StepRequest that resumes prev with its script's reply
// (sdk.Steps' Resume).
func ResumeStep(configID uint64, r sdk.Request, prev sdk.Step, reply sdk.Reply) StepRequest {
	return StepRequest{DecideRequest: DecideRequest{ConfigID: configID, Request: r},
		Resume: true, Script: prev.Script, State: prev.State, Reply: reply}
}

// Prev is the step m resumes, as sdk.NextStep takes it: nil for a first
// step.
func (m *StepRequest) Prev() *sdk.Step {
	if !m.Resume {
		return nil
	}
	return &sdk.Step{Script: m.Script, State: m.State}
}

// Append appends m encoded.
func (m *StepRequest) Append(b []byte) []byte {
	b = m.DecideRequest.Append(b)
	if !m.Resume {
		return b
	}
	b = appendBool(b, 7, true)
	b = appendString(b, 8, m.Script)
	if len(m.State) > 0 {
		b = appendTag(b, 9, protowire.BytesType)
		b = protowire.AppendBytes(b, m.State)
	}
	b, mark := beginNested(b, 10)
	b = AppendReply(b, m.Reply)
	return endNested(b, mark)
}

// Decode decodes b into m.
func (m *StepRequest) Decode(b []byte) error {
	if err := m.DecideRequest.Decode(b); err != nil {
		return err
	}
	m.Resume, m.Script, m.State, m.Reply = false, "", nil, sdk.Reply{}
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: StepRequest: %w", err)
		}
		b = rest
		switch {
		case f.num == 7 && f.isVarint():
			m.Resume = f.u != 0
		case f.num == 8 && f.isBytes():
			m.Script = string(f.bytes)
		case f.num == 9 && f.isBytes():
			m.State = append([]byte(nil), f.bytes...)
		case f.num == 10 && f.isBytes():
			if m.Reply, err = DecodeReply(f.bytes); err != nil {
				return fmt.Errorf("abi: StepRequest reply: %w", err)
			}
		}
	}
	return nil
}

// StepResponse is the answer of ExportStep: a DecideResponse (the same
// fields) when the step is final, or the call the host runs next.
type StepResponse struct {
	DecideResponse
	// Call is the script to run next; its Script is empty when the step
	// is final.
	Call EvalRequest
	// Decides makes the call's reply the decision (sdk.Step.Decides).
	Decides bool
	// Window is the decision's window when Decides; it crosses in whole
	// microseconds.
	Window time.Duration
	// State is carried to the next StepRequest.
	State []byte
}

// SetStep makes m the answer of a plugin's step: its error (DecideError),
// its decision when final, else its call.
func (m *StepResponse) SetStep(s sdk.Step, err error) {
	switch {
	case err != nil:
		m.Error, m.BadRequest = DecideError(err)
	case s.Final():
		m.Decision = s.Decision
	default:
		m.Call = EvalRequest{Script: s.Script, Keys: s.Keys, Args: s.Args}
		m.Decides, m.Window, m.State = s.Decides, s.Window, s.State
	}
}

// Step is the step m answers, on the host: sdk.Done of its decision when it
// calls no script. Its error, if any, is the caller's to check first
// (AnsweredError).
func (m *StepResponse) Step() sdk.Step {
	if m.Call.Script == "" {
		return sdk.Done(m.Decision)
	}
	return sdk.Step{Script: m.Call.Script, Keys: m.Call.Keys, Args: m.Call.Args,
		Decides: m.Decides, Window: m.Window, State: m.State}
}

// Append appends m encoded. It fails on a call argument that cannot cross
// the ABI (AppendArg).
func (m *StepResponse) Append(b []byte) ([]byte, error) {
	if m.Call.Script == "" {
		return m.DecideResponse.Append(b), nil
	}
	b, mark := beginNested(b, 4)
	b, err := m.Call.Append(b)
	if err != nil {
		return b, err
	}
	b = endNested(b, mark)
	b = appendBool(b, 5, m.Decides)
	b = appendSint(b, 6, m.Window.Microseconds())
	if len(m.State) > 0 {
		b = appendTag(b, 7, protowire.BytesType)
		b = protowire.AppendBytes(b, m.State)
	}
	return b, nil
}

// Decode decodes b into m, reusing m.Call's slices.
func (m *StepResponse) Decode(b []byte) error { return m.decode(b, false) }

// decode decodes b into m; fields allows request fields among the call's
// arguments (a template's).
func (m *StepResponse) decode(b []byte, fields bool) error {
	if err := m.DecideResponse.Decode(b); err != nil {
		return err
	}
	m.Call.Script, m.Call.Keys, m.Call.Args = "", m.Call.Keys[:0], m.Call.Args[:0]
	m.Decides, m.Window, m.State = false, 0, nil
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return fmt.Errorf("abi: StepResponse: %w", err)
		}
		b = rest
		switch {
		case f.num == 4 && f.isBytes():
			if err := m.Call.decode(f.bytes, fields); err != nil {
				return fmt.Errorf("abi: StepResponse call: %w", err)
			}
			if m.Call.Script == "" {
				return errors.New("abi: StepResponse call names no script")
			}
		case f.num == 5 && f.isVarint():
			m.Decides = f.u != 0
		case f.num == 6 && f.isVarint():
			m.Window = time.Duration(f.sint()) * time.Microsecond
		case f.num == 7 && f.isBytes():
			m.State = append([]byte(nil), f.bytes...)
		}
	}
	return nil
}

// StepCall is one step ruled sends a process plugin on its steps socket
// (plugin.proto's StepCall): an id and the StepRequest, encoded as the Wasm
// export ruled_step's argument is.
type StepCall struct {
	ID   uint64 // names the step in its answer; never 0
	Step StepRequest
}

// Append appends m encoded. It never fails; the error is there so that
// StepCall and StepAnswer frame alike.
func (m *StepCall) Append(b []byte) ([]byte, error) {
	b = appendUint(b, 1, m.ID)
	b, mark := beginNested(b, 2)
	return endNested(m.Step.Append(b), mark), nil
}

// Decode decodes b into m. ID is set even when the step does not decode.
func (m *StepCall) Decode(b []byte) error {
	id, step, err := decodeIDAndStep(b)
	m.ID = id
	if err != nil {
		return fmt.Errorf("abi: StepCall: %w", err)
	}
	return m.Step.Decode(step)
}

// StepAnswer answers the StepCall with the same ID (plugin.proto's
// StepAnswer); a process plugin's hello has ID 0.
type StepAnswer struct {
	ID   uint64
	Step StepResponse
}

// Append appends m encoded. It fails on a call argument that cannot cross
// (AppendArg).
func (m *StepAnswer) Append(b []byte) ([]byte, error) {
	b = appendUint(b, 1, m.ID)
	b, mark := beginNested(b, 2)
	b, err := m.Step.Append(b)
	if err != nil {
		return b, err
	}
	return endNested(b, mark), nil
}

// Decode decodes b into m. ID is set even when the step does not decode.
func (m *StepAnswer) Decode(b []byte) error {
	id, step, err := decodeIDAndStep(b)
	m.ID = id
	if err != nil {
		return fmt.Errorf("abi: StepAnswer: %w", err)
	}
	return m.Step.Decode(step)
}

// decodeIDAndStep returns the id (field 1) and the step's bytes (field 2)
// of a StepCall or StepAnswer.
func decodeIDAndStep(b []byte) (id uint64, step []byte, err error) {
	for len(b) > 0 {
		f, rest, err := next(b)
		if err != nil {
			return id, nil, err
		}
		b = rest
		switch {
		case f.num == 1 && f.isVarint():
			id = f.u
		case f.num == 2 && f.isBytes():
			step = f.bytes
		}
	}
	return id, step, nil
}
