package guest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
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
		enc = abi.AppendReplyError(nil, &abi.Error{Class: string(capability.ClassOf(err)), Message: err.Error()})
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
	info, err := abi.DecodeInfo(out)
	if err != nil || fmt.Sprint(info) != fmt.Sprint(alg.Info()) {
		t.Fatalf("Info through the glue: %+v, %v", info, err)
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

// TestFixedWindowThroughTheGlue runs the fixed-window plugin through the
// glue's core against real Redis and compares every decision with the
// plugin called directly.
func TestFixedWindowThroughTheGlue(t *testing.T) {
	env := plugintest.NewEnv(t)
	alg := fixedwindow.New()
	reg := plugintest.Register(t, env.Capability(), alg)
	raw := map[string]any{"limit": 7, "window": "500ms", "offset": "1us"}
	cfg := plugintest.Configure(t, alg, raw)
	rng := rand.New(rand.NewPCG(1, 2))
	steps := plugintest.RandomSteps(rng, 300, plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond,
		MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3})
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		want, err := alg.Decide(context.Background(), reg.Host("native", s.Req.Subject), cfg, s.Req)
		if err != nil {
			t.Fatal(err)
		}
		// One glue per subject, since a Host is scoped to one subject.
		g := newGlue(t, alg, reg.Host("glue", s.Req.Subject))
		if problems := g.configure(9, raw); problems != nil {
			t.Fatal(problems)
		}
		got, msg, ok := g.decide(9, s.Req)
		if !ok || msg != "" || got != want {
			t.Fatalf("step %d (%v): got %+v %q %v, want %+v", i, s, got, msg, ok, want)
		}
	}
}

func TestConfigProblemsAreListedOneEach(t *testing.T) {
	g := newGlue(t, fixedwindow.New(), nil)
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
	env := plugintest.NewEnv(t)
	reg := plugintest.Register(t, env.Capability(), g.m.alg)
	g.imp.status, g.imp.h = 0, reg.Host("r", "s")
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
