package guest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
	"github.com/ruled-dev/ruled/sdk/abi"
)

// hostImports plays the host's side of the imports on top of a real
// sdk.Host, the way host/wasm does, so that the glue's core can be tested
// without Wasm.
type hostImports struct {
	h       sdk.Host
	pending []byte
	status  int64 // when non-zero, what redisEval answers
	logs    []string
}

func (f *hostImports) redisEval(req, out []byte) int64 {
	if f.status != 0 {
		return f.status
	}
	var m abi.EvalRequest
	if err := m.Decode(req); err != nil {
		return int64(abi.StatusBadMessage)
	}
	reply, err := f.h.Eval(context.Background(), m.Script, m.Keys, m.Args...)
	var enc []byte
	if err != nil {
		enc = abi.AppendReplyError(nil, &abi.Error{Class: classOf(err), Message: err.Error()})
	} else {
		enc = abi.AppendReply(nil, reply)
	}
	if len(enc) > len(out) {
		f.pending = enc
		return -int64(len(enc))
	}
	return int64(copy(out, enc))
}

func (f *hostImports) takeReply(out []byte) int64 {
	if f.pending == nil {
		return int64(abi.StatusNoReply)
	}
	if len(f.pending) > len(out) {
		return -int64(len(f.pending))
	}
	n := copy(out, f.pending)
	f.pending = nil
	return int64(n)
}

func (f *hostImports) log(level sdk.Level, msg string) {
	f.logs = append(f.logs, fmt.Sprintf("%d %s", level, msg))
}

// glue drives a module the way the host does, through encoded messages.
type glue struct {
	t   *testing.T
	m   *module
	imp *hostImports
}

func newGlue(t *testing.T, alg sdk.Algorithm, h sdk.Host) *glue {
	imp := &hostImports{h: h}
	g := &glue{t: t, m: newModule(alg, imp), imp: imp}
	out, ok := g.call(abi.ExportInit, (&abi.InitRequest{ABIVersion: abi.Version}).Append(nil), (*module).initialize)
	if !ok {
		t.Fatalf("init failed: %v", imp.logs)
	}
	info, steps, err := abi.DecodeInfo(out)
	if err != nil || fmt.Sprint(info) != fmt.Sprint(alg.Info()) {
		t.Fatalf("Info through the glue: %+v, %v", info, err)
	}
	if _, stepper := alg.(sdk.Stepper); steps != stepper {
		t.Fatalf("Info declares steps %v for a %T", steps, alg)
	}
	return g
}

// call copies msg into the module's buffer, as the host does, and runs an
// export's handler.
func (g *glue) call(name string, msg []byte, handle func(*module, []byte) ([]byte, error)) ([]byte, bool) {
	buf := g.m.buffer(len(msg))
	n := copy(buf, msg)
	out, ok := g.m.export(name, buf[:n], handle)
	return append([]byte(nil), out...), ok
}

func (g *glue) configure(id uint64, raw map[string]any) []string {
	g.t.Helper()
	msg, err := (&abi.ConfigureRequest{ConfigID: id, Config: raw}).Append(nil)
	if err != nil {
		g.t.Fatal(err)
	}
	out, ok := g.call(abi.ExportConfigure, msg, (*module).configure)
	if !ok {
		g.t.Fatalf("configure failed: %v", g.imp.logs)
	}
	var resp abi.ConfigureResponse
	if err := resp.Decode(out); err != nil {
		g.t.Fatal(err)
	}
	return resp.Errors
}

func (g *glue) decide(id uint64, r sdk.Request) (sdk.Decision, string, bool) {
	out, ok := g.call(abi.ExportDecide, (&abi.DecideRequest{ConfigID: id, Request: r}).Append(nil), (*module).decide)
	if !ok {
		return sdk.Decision{}, "", false
	}
	var resp abi.DecideResponse
	if err := resp.Decode(out); err != nil {
		g.t.Fatal(err)
	}
	return resp.Decision, resp.Error, true
}

// stepDecide decides through ruled_step the way host/wasm does: it runs
// each call through h and resumes, or decodes the reply of a step that
// decides.
func (g *glue) stepDecide(id uint64, r sdk.Request, h sdk.Host) (sdk.Decision, string) {
	g.t.Helper()
	req := abi.StepRequest{DecideRequest: abi.DecideRequest{ConfigID: id, Request: r}}
	for range sdk.MaxSteps + 1 {
		out, ok := g.call(abi.ExportStep, req.Append(nil), (*module).step)
		if !ok {
			g.t.Fatalf("step failed: %v", g.imp.logs)
		}
		var resp abi.StepResponse
		if err := resp.Decode(out); err != nil {
			g.t.Fatal(err)
		}
		if resp.Call.Script == "" {
			return resp.Decision, resp.Error
		}
		reply, err := h.Eval(context.Background(), resp.Call.Script, resp.Call.Keys, resp.Call.Args...)
		if err != nil {
			return sdk.Decision{}, err.Error()
		}
		if resp.Decides {
			d, err := sdk.StepDecision(sdk.ShapesOf(g.m.alg.Info()),
				sdk.Step{Script: resp.Call.Script, Decides: true, Window: resp.Window}, reply)
			if err != nil {
				return sdk.Decision{}, err.Error()
			}
			return d, ""
		}
		req.Resume, req.Script, req.State, req.Reply = true, resp.Call.Script, resp.State, reply
	}
	g.t.Fatal("no decision after MaxSteps steps")
	return sdk.Decision{}, ""
}

// classOf is the class an error from the Host crosses with. These tests
// run without the daemon (the SDK is its own module), so a Host that wants a
// class returns an *abi.Error; host/wasm takes the class from
// host/capability, and its tests (TestUndeclaredScriptIsRefused) cover that
// mapping with a real guest.
func classOf(err error) string {
	if ae, ok := errors.AsType[*abi.Error](err); ok {
		return ae.Class
	}
	return "internal"
}

// counting is an algorithm that uses everything that crosses the glue: a
// declared script, keys, arguments of several types, an array reply and
// every field of a Decision.
type counting struct{}

func (counting) Info() sdk.Info {
	return sdk.Info{Name: "counting", Version: "1.2.3",
		Scripts: []sdk.Script{{Name: "count", Source: "-- memHost runs it", Commands: []string{"INCRBY", "PEXPIRE"}}}}
}

type countingConfig struct {
	limit  int64
	window time.Duration
}

func (counting) Configure(raw map[string]any) (sdk.Config, error) {
	r := sdk.NewConfigReader(raw)
	c := countingConfig{limit: r.RequireInt("limit"), window: r.RequireDuration("window")}
	if err := r.Done(); err != nil {
		return nil, err
	}
	return c, nil
}

func (counting) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, r sdk.Request) (sdk.Decision, error) {
	c := cfg.(countingConfig)
	reply, err := h.Eval(ctx, "count", []string{"c:" + r.Subject}, r.Hits, c.limit, c.window.Microseconds(), r.DedupID, r.BestEffort)
	if err != nil {
		return sdk.Decision{}, err
	}
	arr, err := reply.Array()
	if err != nil || len(arr) != 3 {
		return sdk.Decision{}, fmt.Errorf("reply %v: %v", reply.Value(), err)
	}
	used, _ := arr[0].Int64()
	if key, _ := arr[1].Str(); key != "c:"+r.Subject || !arr[2].IsNil() {
		return sdk.Decision{}, fmt.Errorf("reply %v", reply.Value())
	}
	d := sdk.Decision{Allowed: used <= c.limit, Limit: c.limit, Remaining: max(0, c.limit-used), Window: c.window,
		Reset: c.window / 2}
	if d.Allowed {
		d.Granted = r.Hits
	} else {
		d.RetryAfter = c.window / 4
	}
	return d, nil
}

// memHost runs counting's script in memory and logs the arguments as Redis
// would see them (text), since the glue may change their Go types.
type memHost struct {
	counts map[string]int64
	args   []string
}

func (m *memHost) Eval(_ context.Context, script string, keys []string, args ...any) (sdk.Reply, error) {
	if script != "count" || len(keys) != 1 || len(args) != 5 {
		return sdk.Reply{}, fmt.Errorf("unexpected Eval %q %q %v", script, keys, args)
	}
	hits, ok := args[0].(int64)
	if !ok {
		return sdk.Reply{}, fmt.Errorf("hits arrived as %T", args[0])
	}
	m.counts[keys[0]] += hits
	text := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case bool: // as go-redis sends it
			text[i] = map[bool]string{true: "1", false: "0"}[a]
		case int64, string:
			text[i] = fmt.Sprint(a)
		default:
			text[i] = fmt.Sprintf("%T", a)
		}
	}
	m.args = append(m.args, strings.Join(text, " "))
	return sdk.NewReply([]any{m.counts[keys[0]], keys[0], nil}), nil
}

func (*memHost) Log(sdk.Level, string) {}

// TestDecisionsThroughTheGlueMatchDirectCalls runs random requests through
// the glue's core and compares every decision with the algorithm called
// directly on a host in the same state. host/wasm's
// TestBuiltinsConformAsWasm does the same for the built-ins compiled to
// Wasm, against real Redis.
func TestDecisionsThroughTheGlueMatchDirectCalls(t *testing.T) {
	alg := counting{}
	raw := map[string]any{"limit": 7, "window": "500ms"}
	cfg, err := alg.Configure(raw)
	if err != nil {
		t.Fatal(err)
	}
	direct, through := &memHost{counts: map[string]int64{}}, &memHost{counts: map[string]int64{}}
	g := newGlue(t, alg, through)
	if problems := g.configure(9, raw); problems != nil {
		t.Fatal(problems)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	allowed, denied := 0, 0
	for i := range 300 {
		r := sdk.Request{Subject: fmt.Sprint("s", rng.IntN(3)), Hits: rng.Int64N(8) - 2, BestEffort: rng.IntN(3) == 0}
		if rng.IntN(3) == 0 {
			r.DedupID = fmt.Sprint("d", i)
		}
		want, err := alg.Decide(context.Background(), direct, cfg, r)
		if err != nil {
			t.Fatal(err)
		}
		got, msg, ok := g.decide(9, r)
		if !ok || msg != "" || got != want {
			t.Fatalf("step %d (%+v): got %+v %q %v, want %+v", i, r, got, msg, ok, want)
		}
		if got.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	if allowed == 0 || denied == 0 || fmt.Sprint(direct.counts) != fmt.Sprint(through.counts) {
		t.Fatalf("%d allowed, %d denied; counts %v and %v", allowed, denied, direct.counts, through.counts)
	}
	for i := range direct.args {
		if direct.args[i] != through.args[i] {
			t.Fatalf("Eval %d: arguments %q directly, %q through the glue", i, direct.args[i], through.args[i])
		}
	}
}

func TestConfigProblemsAreListedOneEach(t *testing.T) {
	g := newGlue(t, counting{}, nil)
	got := g.configure(1, map[string]any{"limt": 3})
	want := []string{"limit: required", "window: required", "limt: unknown field"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, msg, ok := g.decide(1, sdk.Request{Subject: "s", Hits: 1}); !ok || msg != "guest: unknown config id 1" {
		t.Fatalf("decide with a refused config: %q %v", msg, ok)
	}
}

// scripted is an algorithm whose Decide is a test's function.
type scripted struct {
	decide func(ctx context.Context, h sdk.Host) (sdk.Decision, error)
}

func (scripted) Info() sdk.Info { return sdk.Info{Name: "scripted"} }
func (scripted) Configure(raw map[string]any) (sdk.Config, error) {
	if raw["panic"] == true {
		panic("configure exploded")
	}
	return raw, nil
}
func (s scripted) Decide(ctx context.Context, h sdk.Host, _ sdk.Config, _ sdk.Request) (sdk.Decision, error) {
	return s.decide(ctx, h)
}

type cannedHost struct{ reply sdk.Reply }

func (c cannedHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return c.reply, nil
}
func (cannedHost) Log(sdk.Level, string) {}

// failingHost answers every Eval with err.
type failingHost struct{ err error }

func (f failingHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return sdk.Reply{}, f.err
}
func (failingHost) Log(sdk.Level, string) {}

func TestPanicsFailTheCallAndAreLogged(t *testing.T) {
	g := newGlue(t, scripted{decide: func(context.Context, sdk.Host) (sdk.Decision, error) { panic("boom") }}, nil)
	g.configure(1, nil)
	if _, _, ok := g.decide(1, sdk.Request{}); ok {
		t.Fatal("a panicking Decide succeeded")
	}
	if len(g.imp.logs) != 1 || !strings.HasPrefix(g.imp.logs[0], "8 ruled_decide: panic: boom\n") {
		t.Fatalf("logs %q", g.imp.logs)
	}
	msg, _ := (&abi.ConfigureRequest{ConfigID: 2, Config: map[string]any{"panic": true}}).Append(nil)
	if _, ok := g.call(abi.ExportConfigure, msg, (*module).configure); ok {
		t.Fatal("a panicking Configure succeeded")
	}
	// The module keeps working for the calls that follow.
	g.m.alg = scripted{decide: func(context.Context, sdk.Host) (sdk.Decision, error) { return sdk.Decision{Allowed: true}, nil }}
	if d, _, ok := g.decide(1, sdk.Request{}); !ok || !d.Allowed {
		t.Fatal("module broken after a panic")
	}
}

func TestLargeRepliesAreTakenWhole(t *testing.T) {
	big := strings.Repeat("x", 100_000)
	var got string
	g := newGlue(t, scripted{decide: func(ctx context.Context, h sdk.Host) (sdk.Decision, error) {
		r, err := h.Eval(ctx, "big", nil)
		if err != nil {
			return sdk.Decision{}, err
		}
		got, err = r.Str()
		return sdk.Decision{}, err
	}}, cannedHost{reply: sdk.NewReply(big)})
	g.configure(1, nil)
	for range 2 {
		if _, msg, ok := g.decide(1, sdk.Request{}); !ok || msg != "" || got != big {
			t.Fatalf("%q %v, %d bytes", msg, ok, len(got))
		}
	}
	if cap(g.m.host.reply) > maxKeptCap {
		t.Fatalf("kept a %d-byte reply buffer", cap(g.m.host.reply))
	}
}

func TestStatusesAndHostErrorsBecomeEvalErrors(t *testing.T) {
	var evalErr error
	g := newGlue(t, scripted{decide: func(ctx context.Context, h sdk.Host) (sdk.Decision, error) {
		_, evalErr = h.Eval(ctx, "s", []string{"k"}, 1)
		return sdk.Decision{}, evalErr
	}}, nil)
	g.configure(1, nil)
	g.imp.status = int64(abi.StatusBadPointer)
	if _, msg, _ := g.decide(1, sdk.Request{}); msg != "guest: Eval s: redis_eval: bad pointer" {
		t.Fatalf("%q", msg)
	}
	// A capability error crosses as an *abi.Error with its class.
	g.imp.status, g.imp.h = 0, failingHost{&abi.Error{Class: "refused", Message: `capability: script "s" was not declared`}}
	_, msg, _ := g.decide(1, sdk.Request{})
	var ae *abi.Error
	if !errors.As(evalErr, &ae) || ae.Class != "refused" || !strings.Contains(msg, `script "s" was not declared`) {
		t.Fatalf("%q, %#v", msg, evalErr)
	}
}

func TestEvalRefusesWhatCannotCross(t *testing.T) {
	var evalErr error
	g := newGlue(t, scripted{decide: func(ctx context.Context, h sdk.Host) (sdk.Decision, error) {
		_, evalErr = h.Eval(ctx, "s", nil, []any{1})
		return sdk.Decision{}, nil
	}}, cannedHost{})
	g.configure(1, nil)
	g.decide(1, sdk.Request{})
	if !errors.Is(evalErr, abi.ErrArgType) {
		t.Fatalf("%v", evalErr)
	}
	if _, err := g.m.host.Eval(context.Background(), "s", nil); err == nil {
		t.Fatal("Eval outside Decide succeeded")
	}
}

func TestBufferGrowsAndStaysPut(t *testing.T) {
	m := newModule(scripted{}, nil)
	a := m.buffer(10)
	b := m.buffer(1000)
	if &a[0] != &b[0] {
		t.Fatal("buffer moved although it had room")
	}
	c := m.buffer(100_000)
	if len(c) < 100_000 {
		t.Fatalf("buffer of %d bytes", len(c))
	}
}

func TestInitRefusesAnotherABI(t *testing.T) {
	m := newModule(scripted{}, &hostImports{})
	if _, ok := m.export(abi.ExportInit, (&abi.InitRequest{ABIVersion: 2}).Append(nil), (*module).initialize); ok {
		t.Fatal("init accepted ABI 2")
	}
}

func TestRegister(t *testing.T) {
	defer func() { registered = nil }()
	mustPanic := func(f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Fatal("no panic")
			}
		}()
		f()
	}
	mustPanic(func() { Register(nil) })
	Register(scripted{})
	mustPanic(func() { Register(scripted{}) })
}

// steppingCounting is counting deciding in steps: Start names the call,
// Resume reads its reply, and the subject travels in the step's State
// (checked on resume, since instances may change between steps).
type steppingCounting struct{ counting }

func (c steppingCounting) Start(_ context.Context, cfg sdk.Config, r sdk.Request) (sdk.Step, error) {
	cc := cfg.(countingConfig)
	s := sdk.Run("count", []string{"c:" + r.Subject}, r.Hits, cc.limit, cc.window.Microseconds(), r.DedupID, r.BestEffort)
	s.State = []byte(r.Subject)
	return s, nil
}

func (c steppingCounting) Resume(ctx context.Context, cfg sdk.Config, r sdk.Request, s sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	if string(s.State) != r.Subject || s.Script != "count" {
		return sdk.Step{}, fmt.Errorf("resumed step %q with state %q for subject %q", s.Script, s.State, r.Subject)
	}
	// The reply as Decide reads it, from a host that only replays it.
	d, err := c.Decide(ctx, replayHost{reply}, cfg, r)
	if err != nil {
		return sdk.Step{}, err
	}
	return sdk.Done(d), nil
}

// replayHost answers every Eval with one reply.
type replayHost struct{ reply sdk.Reply }

func (h replayHost) Eval(context.Context, string, []string, ...any) (sdk.Reply, error) {
	return h.reply, nil
}
func (replayHost) Log(sdk.Level, string) {}

// TestStepsThroughTheGlueMatchDirectCalls decides random requests through
// ruled_step and compares each decision, and the arguments the host ran
// the script with, with the algorithm's own Decide. host/wasm's
// TestBuiltinsConformAsWasm runs the built-ins, which decide in steps,
// against real Redis.
func TestStepsThroughTheGlueMatchDirectCalls(t *testing.T) {
	alg := steppingCounting{}
	raw := map[string]any{"limit": 5, "window": "1s"}
	cfg, err := alg.Configure(raw)
	if err != nil {
		t.Fatal(err)
	}
	direct, through := &memHost{counts: map[string]int64{}}, &memHost{counts: map[string]int64{}}
	g := newGlue(t, alg, nil)
	if problems := g.configure(4, raw); problems != nil {
		t.Fatal(problems)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	allowed := 0
	for i := range 200 {
		r := sdk.Request{Subject: fmt.Sprint("s", rng.IntN(3)), Hits: rng.Int64N(4), BestEffort: rng.IntN(3) == 0}
		want, err := alg.Decide(context.Background(), direct, cfg, r)
		if err != nil {
			t.Fatal(err)
		}
		got, msg := g.stepDecide(4, r, through)
		if msg != "" || got != want {
			t.Fatalf("request %d (%+v): got %+v %q, want %+v", i, r, got, msg, want)
		}
		if got.Allowed {
			allowed++
		}
	}
	if allowed == 0 || allowed == 200 || fmt.Sprint(direct.args) != fmt.Sprint(through.args) {
		t.Fatalf("%d allowed; the host ran different calls: %v and %v", allowed, direct.args, through.args)
	}
}

// A plugin that does not decide in steps refuses ruled_step.
func TestStepNeedsAStepper(t *testing.T) {
	g := newGlue(t, counting{}, nil)
	if _, ok := g.call(abi.ExportStep, nil, (*module).step); ok || !strings.Contains(strings.Join(g.imp.logs, "\n"), "does not decide in steps") {
		t.Fatalf("ruled_step answered for a plugin without steps: %v", g.imp.logs)
	}
}

// templated starts every decision with one templated call.
type templated struct{ sdk.OneStep }

type templatedConfig struct{ limit int64 }

func (templated) Info() sdk.Info {
	return sdk.Info{Name: "templated", Scripts: []sdk.Script{{Name: "decide", Source: "return 1"}}}
}

func (templated) Configure(raw map[string]any) (sdk.Config, error) {
	n, _ := raw["limit"].(int)
	if n < 0 {
		return nil, errors.New("limit: below 0")
	}
	return templatedConfig{limit: int64(n)}, nil
}

func (t templated) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	return sdk.StepDecide(t)(ctx, h, c, r)
}

// Template offers a template for limits but 0.
func (templated) Template(c sdk.Config) (sdk.Step, bool) {
	cfg := c.(templatedConfig)
	return sdk.Run("decide", []string{"k"}, cfg.limit, sdk.FieldHits, sdk.FieldDedupID, sdk.FieldBestEffort).
		ThenDecide(time.Minute), cfg.limit != 0
}

func (t templated) Start(_ context.Context, c sdk.Config, r sdk.Request) (sdk.Step, error) {
	tmpl, _ := t.Template(c)
	return sdk.Expand(tmpl, r), nil
}

func TestConfigureAnswersTheTemplate(t *testing.T) {
	g := newGlue(t, templated{}, nil)
	configure := func(id uint64, limit int) abi.ConfigureResponse {
		msg, err := (&abi.ConfigureRequest{ConfigID: id, Config: map[string]any{"limit": limit}}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		out, ok := g.call(abi.ExportConfigure, msg, (*module).configure)
		if !ok {
			t.Fatalf("configure failed: %v", g.imp.logs)
		}
		var resp abi.ConfigureResponse
		if err := resp.Decode(out); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := configure(1, 50)
	if resp.Template == nil || len(resp.Errors) > 0 {
		t.Fatalf("no template: %+v", resp)
	}
	// The template expands to what ruled_step starts with.
	r := sdk.Request{Subject: "s", Hits: 4, DedupID: "d", BestEffort: true}
	req := abi.StepRequest{DecideRequest: abi.DecideRequest{ConfigID: 1, Request: r}}
	out, ok := g.call(abi.ExportStep, req.Append(nil), (*module).step)
	if !ok {
		t.Fatalf("step failed: %v", g.imp.logs)
	}
	var step abi.StepResponse
	if err := step.Decode(out); err != nil {
		t.Fatal(err)
	}
	if got, want := sdk.Expand(*resp.Template, r), step.Step(); !reflect.DeepEqual(got, want) {
		t.Fatalf("template expands to %#v, ruled_step starts with %#v", got, want)
	}

	if resp := configure(2, 0); resp.Template != nil {
		t.Errorf("a config without a template answered %#v", resp.Template)
	}
	if resp := configure(3, -1); resp.Template != nil || len(resp.Errors) != 1 {
		t.Errorf("an invalid config answered %+v", resp)
	}
}
