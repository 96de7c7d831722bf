package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

// evalHost answers Eval with reply(script, args) and records the calls.
type evalHost struct {
	calls []string
	reply func(script string, args []any) (sdk.Reply, error)
}

func (h *evalHost) Eval(_ context.Context, script string, _ []string, args ...any) (sdk.Reply, error) {
	h.calls = append(h.calls, script)
	return h.reply(script, args)
}

func (*evalHost) Log(sdk.Level, string) {}

// twoStep reads a counter ("get"), then writes it plus the state's byte
// ("put"), then answers; steps limits how many calls it asks for.
type twoStep struct{ steps int }

func (twoStep) Info() sdk.Info {
	return sdk.Info{Name: "two", Scripts: []sdk.Script{
		{Name: "get", Returns: sdk.NewShape("n")},
		{Name: "put", Returns: sdk.DecisionShape},
	}}
}
func (twoStep) Configure(map[string]any) (sdk.Config, error) { return nil, nil }
func (p twoStep) Decide(ctx context.Context, h sdk.Host, c sdk.Config, r sdk.Request) (sdk.Decision, error) {
	return sdk.DecideSteps(ctx, h, p, sdk.ShapesOf(p.Info()), c, r)
}
func (twoStep) Start(_ context.Context, _ sdk.Config, r sdk.Request) (sdk.Step, error) {
	s := sdk.Run("get", []string{"k"})
	s.State = []byte{byte(r.Hits)}
	return s, nil
}
func (p twoStep) Resume(_ context.Context, _ sdk.Config, _ sdk.Request, s sdk.Step, reply sdk.Reply) (sdk.Step, error) {
	if p.steps > 2 { // a plugin that never finishes
		return sdk.Run("get", []string{"k"}), nil
	}
	n, err := sdk.NewShape("n").Int(reply, "n")
	if err != nil {
		return sdk.Step{}, err
	}
	return sdk.Run("put", []string{"k"}, n+int64(s.State[0])).ThenDecide(time.Minute), nil
}

func TestDecideStepsRunsEachCallAndCarriesState(t *testing.T) {
	h := &evalHost{reply: func(script string, args []any) (sdk.Reply, error) {
		if script == "get" {
			return sdk.IntsReply(40), nil
		}
		return sdk.IntsReply(1, args[0].(int64), 100, 58, 1000, 0), nil
	}}
	d, err := twoStep{}.Decide(context.Background(), h, nil, sdk.Request{Hits: 2})
	if err != nil || !d.Allowed || d.Granted != 42 || d.Window != time.Minute {
		t.Fatalf("%+v, %v", d, err)
	}
	if strings.Join(h.calls, ",") != "get,put" {
		t.Fatalf("calls %v", h.calls)
	}
}

func TestDecideStepsBounds(t *testing.T) {
	h := &evalHost{reply: func(string, []any) (sdk.Reply, error) { return sdk.IntsReply(1), nil }}
	_, err := twoStep{steps: 3}.Decide(context.Background(), h, nil, sdk.Request{Hits: 1})
	if err == nil || !strings.Contains(err.Error(), "more than 8 script calls") || len(h.calls) != sdk.MaxSteps {
		t.Fatalf("%v after %d calls", err, len(h.calls))
	}
	// A failed call ends the decision with the host's error.
	boom := errors.New("boom")
	h = &evalHost{reply: func(string, []any) (sdk.Reply, error) { return sdk.Reply{}, boom }}
	if _, err := (twoStep{}).Decide(context.Background(), h, nil, sdk.Request{Hits: 1}); !errors.Is(err, boom) {
		t.Fatalf("%v", err)
	}
	// A reply of the wrong shape, read by the plugin, is an error.
	h = &evalHost{reply: func(string, []any) (sdk.Reply, error) { return sdk.IntsReply(1, 2), nil }}
	if _, err := (twoStep{}).Decide(context.Background(), h, nil, sdk.Request{Hits: 1}); err == nil ||
		!strings.Contains(err.Error(), "has 2 elements, want 1: {n}") {
		t.Fatalf("%v", err)
	}
}

func TestStepDecisionNeedsADeclaredShape(t *testing.T) {
	none := sdk.ShapesOf(sdk.Info{Scripts: []sdk.Script{{Name: "a"}, {Name: "b"}}})
	step := sdk.Run("a", nil).ThenDecide(time.Second)
	if _, err := sdk.StepDecision(none, step, sdk.IntsReply(1, 1, 1, 1, 1, 0)); err == nil ||
		!strings.Contains(err.Error(), `script "a" declares no reply shape`) {
		t.Fatalf("%v", err)
	}
}

func TestStepCheck(t *testing.T) {
	big := sdk.Run("a", nil)
	big.State = make([]byte, sdk.MaxStepState+1)
	bad := sdk.Done(sdk.Decision{})
	bad.Args = []any{1}
	for _, s := range []sdk.Step{big, bad} {
		if s.Check() == nil {
			t.Errorf("%+v passed Check", s)
		}
	}
	if err := sdk.Run("a", []string{"k"}, 1).ThenDecide(time.Second).Check(); err != nil {
		t.Fatal(err)
	}
}

func TestOneStepRefusesToResume(t *testing.T) {
	if _, err := (sdk.OneStep{}).Resume(context.Background(), nil, sdk.Request{}, sdk.Step{}, sdk.Reply{}); err == nil {
		t.Fatal("OneStep resumed a step")
	}
}
