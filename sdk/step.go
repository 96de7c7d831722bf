package sdk

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Stepper is an Algorithm that decides in steps instead of blocking on
// Host.Eval: each step either answers or names the script the host runs
// next. The host runs the script itself (pipelined with other decisions'
// scripts) and holds no plugin instance, process call or goroutine of the
// plugin across the Redis round trip; for a plugin that is not linked into
// ruled (a Wasm module, a process) this is what makes it as fast as a
// built-in. Most plugins need one script call per decision and take one
// step (Run(...).Decides). Decide stays the plugin's blocking form: a
// Stepper implements it with DecideSteps.
//
// A step holds nothing of the plugin across the round trip but State: the
// host may run Start and Resume on different instances of a Wasm module,
// and passes a plugin that is not linked into ruled only the Script and
// State of the step it resumes (not its Keys and Args).
type Stepper interface {
	Algorithm
	Steps
}

// Steps is the stepping half of a Stepper: all DecideSteps needs.
type Steps interface {
	// Start begins deciding r: it returns the first script call, or the
	// decision when no script is needed. ctx bounds the host's work
	// around the call; a plugin's own Start does not block.
	Start(ctx context.Context, c Config, r Request) (Step, error)
	// Resume continues a decision after the host ran the call of step s
	// (as Start or an earlier Resume returned it) and got reply, which
	// has the script's declared shape. It returns the next call or the
	// decision. It is not called for a step that Decides.
	Resume(ctx context.Context, c Config, r Request, s Step, reply Reply) (Step, error)
}

// MaxSteps bounds the script calls of one stepped decision; a plugin that
// asks for more fails the decision.
const MaxSteps = 8

// MaxStepState bounds Step.State, in bytes.
const MaxStepState = 4096

// Step is where a stepped decision stands: either the decision, or a
// script call for the host to run next. Build steps with Done and Run.
type Step struct {
	// Script, Keys and Args are the call to run next, as Host.Eval takes
	// them; Script is empty when the step is final.
	Script string
	Keys   []string
	Args   []any
	// Decides, on a step with a call, makes the call's reply the decision:
	// the host decodes it with the script's declared Shape
	// (Shape.Decision, with Window) and does not resume the plugin.
	Decides bool
	// Window is Decision.Window of a step that Decides.
	Window time.Duration
	// State is the plugin's own data, passed back to Resume unchanged
	// (at most MaxStepState bytes). The host does not read it.
	State []byte
	// Decision is the answer of a final step.
	Decision Decision
}

// Done returns the final step that answers d.
func Done(d Decision) Step { return Step{Decision: d} }

// Run returns a step that runs the declared script with keys and args (as
// Host.Eval) and then resumes the plugin with its reply.
func Run(script string, keys []string, args ...any) Step {
	return Step{Script: script, Keys: keys, Args: args}
}

// ThenDecide returns s with the call's reply as the decision: the host
// decodes it with the script's declared Shape and window, without
// resuming the plugin.
func (s Step) ThenDecide(window time.Duration) Step {
	s.Decides, s.Window = true, window
	return s
}

// Final reports whether the step is the decision.
func (s Step) Final() bool { return s.Script == "" }

// Check reports a step the host must refuse: a decision with a call, a
// state too large, a request Field among its arguments (only a template
// holds those: Expand replaces them).
func (s Step) Check() error {
	if len(s.State) > MaxStepState {
		return fmt.Errorf("step state of %d bytes exceeds %d", len(s.State), MaxStepState)
	}
	if s.Final() && (s.Decides || len(s.Keys) > 0 || len(s.Args) > 0) {
		return errors.New("step has keys, arguments or Decides but no script")
	}
	for i, a := range s.Args {
		if f, ok := a.(Field); ok {
			return fmt.Errorf("step argument %d is the request field %v: only a template's arguments name fields (Expand)", i, f)
		}
	}
	return nil
}

// NextStep is a plugin's next step of deciding r: st's Start when prev is
// nil, else its Resume after prev's call answered reply; a step that is
// not well formed (Step.Check) is an error. Both plugin-side runtimes
// (sdk/guest, sdk/process) answer a host's step with it.
func NextStep(ctx context.Context, st Steps, c Config, r Request, prev *Step, reply Reply) (Step, error) {
	var s Step
	var err error
	if prev == nil {
		s, err = st.Start(ctx, c, r)
	} else {
		s, err = st.Resume(ctx, c, r, *prev, reply)
	}
	if err == nil {
		err = s.Check()
	}
	return s, err
}

// OneStep is embedded by a Stepper whose every decision is one step that
// Decides (Run(...).ThenDecide): it supplies the Resume that is never
// called.
type OneStep struct{}

// Resume implements Steps; a step that Decides is never resumed.
func (OneStep) Resume(context.Context, Config, Request, Step, Reply) (Step, error) {
	return Step{}, errors.New("sdk: a step that decides was resumed")
}

// StepDecide returns a Stepper's Decide: DecideSteps with the shapes of
// s.Info() built once. A plugin writes
//
//	var decide = sdk.StepDecide(Plugin{})
//
//	func (Plugin) Decide(ctx context.Context, h sdk.Host, cfg sdk.Config, req sdk.Request) (sdk.Decision, error) {
//		return decide(ctx, h, cfg, req)
//	}
func StepDecide(s Stepper) func(ctx context.Context, h Host, c Config, r Request) (Decision, error) {
	shapes := ShapesOf(s.Info())
	return func(ctx context.Context, h Host, c Config, r Request) (Decision, error) {
		return DecideSteps(ctx, h, s, shapes, c, r)
	}
}

// ShapeOf returns a script's declared reply shape, or nil when it declares
// none; the host passes its own lookup to DecideSteps.
type ShapeOf func(script string) *Shape

// DecideSteps runs a Stepper's steps through h until it answers: what
// Decide does for a plugin that decides in steps (and what the host does,
// without blocking a plugin instance, for one that does not link into
// ruled). shape gives each script's declared Shape, for the steps that
// Decide; ShapesOf(s.Info()) builds it once.
func DecideSteps(ctx context.Context, h Host, s Steps, shape ShapeOf, c Config, r Request) (Decision, error) {
	step, err := s.Start(ctx, c, r)
	for n := 0; ; n++ {
		if err != nil {
			return Decision{}, err
		}
		if err := step.Check(); err != nil {
			return Decision{}, err
		}
		if step.Final() {
			return step.Decision, nil
		}
		if n == MaxSteps {
			return Decision{}, fmt.Errorf("decision takes more than %d script calls", MaxSteps)
		}
		var reply Reply
		if reply, err = h.Eval(ctx, step.Script, step.Keys, step.Args...); err != nil {
			return Decision{}, err
		}
		if step.Decides {
			return StepDecision(shape, step, reply)
		}
		step, err = s.Resume(ctx, c, r, step, reply)
	}
}

// StepDecision decodes the reply to a step that Decides, with the script's
// declared shape.
func StepDecision(shape ShapeOf, step Step, reply Reply) (Decision, error) {
	sh := shape(step.Script)
	if sh == nil {
		return Decision{}, fmt.Errorf("script %q declares no reply shape, so its reply cannot be the decision", step.Script)
	}
	d, err := sh.Decision(reply, step.Window)
	if err != nil {
		return Decision{}, fmt.Errorf("script %q: %w", step.Script, err)
	}
	return d, nil
}

// ShapesOf returns the lookup of the reply shapes info's scripts declare.
func ShapesOf(info Info) ShapeOf {
	if len(info.Scripts) == 1 { // the common case: no map
		s := info.Scripts[0]
		return func(name string) *Shape {
			if name == s.Name {
				return s.Returns
			}
			return nil
		}
	}
	shapes := make(map[string]*Shape, len(info.Scripts))
	for _, s := range info.Scripts {
		shapes[s.Name] = s.Returns
	}
	return func(name string) *Shape { return shapes[name] }
}
