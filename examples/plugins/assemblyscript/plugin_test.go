package assemblyscript_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/host/wasm"
	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/plugintest"
	"github.com/ruled-dev/ruled/sdk"
)

func TestInfo(t *testing.T) {
	p := load(t, asModule, wasm.Options{PoolSize: 1, Prewarm: 1})
	got, native := p.Info(), fixedwindow.New().Info()
	if got.Name != "fixedwindow-as" || got.Version != "1.0.0" {
		t.Errorf("name %q version %q, want fixedwindow-as 1.0.0", got.Name, got.Version)
	}
	if got.Traits != native.Traits {
		t.Errorf("traits %+v, want plugins/fixedwindow's %+v", got.Traits, native.Traits)
	}
	// The port has fixed windows only: the native plugin's first script
	// (its second, "calendar", is the same source for calendar periods).
	if !reflect.DeepEqual(got.Scripts, native.Scripts[:1]) {
		t.Errorf("scripts differ from plugins/fixedwindow's decide:\n as     %+v\n native %+v", got.Scripts, native.Scripts[:1])
	}
	src, err := os.ReadFile("../../../plugins/fixedwindow/script.lua")
	if err != nil || len(got.Scripts) != 1 || got.Scripts[0].Source != string(src) {
		t.Errorf("the script is not plugins/fixedwindow/script.lua (%v)", err)
	}
}

// conformCases are the rule configs and request sequences on which the AssemblyScript plugin
// must decide exactly as the model and the native plugin do.
var conformCases = []struct {
	name string
	raw  map[string]any
	opts plugintest.StepOptions
}{
	{"single-hits", map[string]any{"limit": 5, "window": "1s"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 150 * time.Millisecond}},
	{"offset-multi-hits-peeks", map[string]any{"limit": 10, "window": "2s", "offset": "700ms"},
		plugintest.StepOptions{Subjects: 3, MaxAdvance: 400 * time.Millisecond, MinHits: 0, MaxHits: 4}},
	{"dedup-best-effort-refunds", map[string]any{"limit": 7, "window": "500ms", "offset": "1us"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 90 * time.Millisecond, MinHits: -2, MaxHits: 5, Dedup: 0.4, BestEffort: 0.3}},
	// Values that go through the config reader's conversions: a string limit, a fractional
	// window, an offset in nanoseconds that the script gets truncated to microseconds.
	{"converted-config", map[string]any{"limit": " 3 ", "window": "1.5s", "offset": "250000999ns"},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: 300 * time.Millisecond, MinHits: -1, MaxHits: 3, Dedup: 0.3, BestEffort: 0.5}},
	{"big-numbers", map[string]any{"limit": int64(1) << 40, "window": time.Duration(24 * time.Hour), "offset": 0},
		plugintest.StepOptions{Subjects: 2, MaxAdvance: time.Hour, MinHits: -(1 << 38), MaxHits: 1 << 39, Dedup: 0.3, BestEffort: 0.3}},
}

// TestConformsToNative runs the module through the conformance kit against the Go model, and step
// by step against the native plugins/fixedwindow on the same Redis and clock: every field of
// every decision must be equal.
func TestConformsToNative(t *testing.T) {
	env := plugintest.NewEnv(t)
	w := load(t, asModule, wasm.Options{})
	native := fixedwindow.New()
	for _, tc := range conformCases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			steps := plugintest.RandomSteps(rng, 500, tc.opts)
			model := func(sdk.Config) sdk.LocalLimiter {
				return fixedwindow.NewModel(plugintest.Configure(t, native, tc.raw).(fixedwindow.Config))
			}
			env.Conform(t, w, tc.raw, model, steps)
			sameDecisions(t, env, native, w, tc.raw, steps)
		})
	}
	if s := w.Stats(); s.Discarded != 0 {
		t.Errorf("%+v: instances were discarded", s)
	}
}

// sameDecisions runs steps through both algorithms, each under its own rule (so its own keys),
// and fails at the first difference.
func sameDecisions(t *testing.T, env *plugintest.Env, native, w sdk.Algorithm, raw map[string]any, steps []plugintest.Step) {
	t.Helper()
	nc, wc := plugintest.Configure(t, native, raw), plugintest.Configure(t, w, raw)
	c := env.Capability()
	np, wp := plugintest.Register(t, c, native), plugintest.Register(t, c, w)
	rule := fmt.Sprintf("same-%d", rand.Int64())
	ctx := context.Background()
	for i, s := range steps {
		env.Clock.Advance(s.Advance)
		dn, errN := native.Decide(ctx, np.Host(rule+"-n", s.Req.Subject), nc, s.Req)
		dw, errW := w.Decide(ctx, wp.Host(rule+"-w", s.Req.Subject), wc, s.Req)
		if dn != dw || errN != nil || errW != nil {
			t.Fatalf("step %d (%v):\nnative %+v %v\nas     %+v %v", i, s, dn, errN, dw, errW)
		}
	}
}

// TestKeysAndExpiry checks the module's keys in Redis: the plugin's namespace, the subject's hash
// slot, and the script's expiry, as for the native plugin.
func TestKeysAndExpiry(t *testing.T) {
	env := plugintest.NewEnv(t)
	w := load(t, asModule, wasm.Options{PoolSize: 1, Prewarm: 1})
	r := env.Rule(t, w, map[string]any{"limit": 2, "window": "2s"})
	if d := r.Decide(sdk.Request{Subject: "ttl", Hits: 1, DedupID: "x"}); !d.Allowed || d.Granted != 1 || d.Remaining != 1 {
		t.Fatalf("first decision: %+v", d)
	}
	ctx := context.Background()
	keys, err := env.Redis.Client().Keys(ctx, "ruled:fixedwindow-as:r:{ttl}:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %v, %v: want the counter and dedup keys", keys, err)
	}
	for _, k := range keys {
		ttl, err := env.Redis.Client().PTTL(ctx, k).Result()
		if err != nil || ttl <= 0 || ttl > 3*time.Second {
			t.Fatalf("%s: ttl %v (%v), want within window + 1s slack", k, ttl, err)
		}
	}
}

// TestConfigErrorsMatchNative checks that the module refuses the same configs as the native
// plugin, with the same messages, one problem each; and accepts the same.
func TestConfigErrorsMatchNative(t *testing.T) {
	w := load(t, asModule, wasm.Options{PoolSize: 1, Prewarm: 1})
	native := fixedwindow.New()
	nested := []any{1, "two words", nil, []byte{1, 200}, time.Second, 1.5, true,
		map[string]any{"b": map[string]any{}, "a": []any{}, "": nil}}
	for i, raw := range []map[string]any{
		{},
		{"limit": 0, "window": "1s"},
		{"limit": -3, "window": "999us", "offset": "-1ns"},
		{"limit": 1, "window": "10"},
		{"limit": 1, "window": "1s", "offset": "2s"},
		{"limit": 1, "window": "1s", "offset": "1s"},
		{"limit": 1, "window": "1s", "limt": 3, "Window": 1, "": 2, "zz\xff": 3, "é": 4},
		{"limit": "many", "window": "1s"},
		{"limit": "9223372036854775807", "window": "1ms"},
		{"limit": "9223372036854775808", "window": "1ms"},
		{"limit": "-9223372036854775808", "window": "1ms"},
		{"limit": "+5", "window": "1ms"},
		{"limit": "5 5", "window": "1ms"},
		{"limit": "", "window": "1ms"},
		{"limit": "1_000", "window": "1ms"},
		{"limit": " \t\n\u00a0\u2003\u300012\u205f\u2029\u0085", "window": "1ms"},
		{"limit": "\xc212", "window": "1ms"},
		{"limit": 1.5, "window": "1s"},
		{"limit": 2.0, "window": "1s"},
		{"limit": math.Copysign(0, -1), "window": "1s"},
		{"limit": 1e15, "window": "1s"},
		{"limit": 9007199254740992.0, "window": "1s"},
		{"limit": 1e20, "window": "1s"},
		{"limit": 123456.5, "window": "1s"},
		{"limit": 1234567.25, "window": "1s"},
		{"limit": 0.000123, "window": "1s"},
		{"limit": 1.5e-7, "window": "1s"},
		{"limit": -2.5e300, "window": "1s"},
		{"limit": math.NaN(), "window": "1s"},
		{"limit": math.Inf(1), "window": math.Inf(-1)},
		{"limit": uint64(math.MaxUint64), "window": uint64(math.MaxUint64)},
		{"limit": uint64(5), "window": "1s"},
		{"limit": true, "window": false},
		{"limit": nil, "window": nil, "offset": nil},
		{"limit": []byte("12"), "window": []byte{}},
		{"limit": nested, "window": map[string]any{"x": nested}},
		{"limit": []any{}, "window": map[string]any{}},
		{"limit": 1, "window": time.Duration(1500)},
		{"limit": 1, "window": time.Hour + 1500*time.Microsecond, "offset": -time.Hour},
		{"limit": 1, "window": 5},
		{"limit": 1, "window": 0},
		{"limit": 1, "window": 0.0},
		{"limit": 1, "window": 1.5},
		{"limit": 1, "window": -2.0},
		{"limit": 1, "window": "0"},
		{"limit": 1, "window": "-0"},
		{"limit": 1, "window": "+1s", "offset": "1.5µs"},
		{"limit": 1, "window": "1μs"},
		{"limit": 1, "window": ".5s", "offset": "1.s"},
		{"limit": 1, "window": "."},
		{"limit": 1, "window": "1.2.3s"},
		{"limit": 1, "window": "1d"},
		{"limit": 1, "window": "1h2m3.5s4ms5us6ns"},
		{"limit": 1, "window": "2562047h47m16.854775807s"},
		{"limit": 1, "window": "2562047h47m16.854775808s"},
		{"limit": 1, "window": "9223372036854775807ns"},
		{"limit": 1, "window": "9223372036854775808ns"},
		{"limit": 1, "window": "-9223372036854775808ns"},
		{"limit": 1, "window": "0.0000000000000000000001s"},
		{"limit": 1, "window": "1.00000000000000000000000000009h"},
		{"limit": 1, "window": "18446744073709551616ns"},
		{"limit": 1, "window": " 2s\t"},
		{"limit": 1, "window": "\u00a02s\u3000"},
		{"limit": 1, "window": "2 s"},
		{"limit": 1, "window": ""},
		{"limit": 1, "window": "-"},
		{"limit": 1, "window": "1s", "offset": "999.9999ms"},
		{"limit": floats(), "window": "1s"},
	} {
		_, errN := native.Configure(raw)
		_, errW := w.Configure(raw)
		if (errN == nil) != (errW == nil) || (errN != nil && errN.Error() != errW.Error()) {
			t.Errorf("%d %v:\nnative %q\nas     %q", i, raw, errN, errW)
			continue
		}
		if errW == nil {
			continue
		}
		jn, okN := errN.(interface{ Unwrap() []error })
		jw, okW := errW.(interface{ Unwrap() []error })
		if !okN || !okW || len(jn.Unwrap()) != len(jw.Unwrap()) {
			t.Errorf("%d %v: not the same list of problems: %#v", i, raw, errW)
		}
	}
	if s := w.Stats(); s.Discarded != 0 {
		t.Errorf("%+v: instances were discarded", s)
	}
}

// floats returns doubles that are hard to print: random bit patterns, neighbours of powers of two
// and ten, subnormals, the extremes. Go prints each with the shortest digits that read back.
func floats() []any {
	rng := rand.New(rand.NewPCG(11, 12))
	var out []any
	for range 250 {
		out = append(out, math.Float64frombits(rng.Uint64()))
	}
	for e := -1074; e <= 1023; e += 23 {
		f := math.Ldexp(1, e)
		out = append(out, f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1)))
	}
	for e := -323; e <= 308; e += 11 {
		f, _ := strconv.ParseFloat("1e"+strconv.Itoa(e), 64)
		out = append(out, f, math.Nextafter(f, 0), math.Nextafter(f, math.Inf(1)))
	}
	for range 100 {
		out = append(out, float64(rng.IntN(1_000_000))/float64(rng.IntN(1000)+1), rng.Float64()*1e6)
	}
	return append(out, math.SmallestNonzeroFloat64, math.MaxFloat64, 0.1, 0.2, 0.3, 2.0/3, 1e-5, 1e-4, 123456.0, 1e6, 5e-324)
}

// TestCapabilityErrorsUnwrap checks that a failed Redis call reaches the engine as the capability
// error it was, as from a native plugin.
func TestCapabilityErrorsUnwrap(t *testing.T) {
	w := load(t, asModule, wasm.Options{PoolSize: 1, Prewarm: 1})
	cfg := plugintest.Configure(t, w, map[string]any{"limit": 1, "window": "1s"})
	boom := errors.New("redis: connection refused")
	_, err := w.Decide(context.Background(), &stubHost{err: boom}, cfg, sdk.Request{Subject: "s", Hits: 1})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), boom.Error()) {
		t.Fatalf("error %v, want one that unwraps to %v", err, boom)
	}
	// Replies the decision cannot come from are errors of the call, not of the instance.
	for _, tc := range []struct {
		reply sdk.Reply
		want  string
	}{
		{sdk.NewReply(nil), "decision reply: reply is nil, want an array %[1]s"},
		{sdk.NewReply("x"), `decision reply: reply is "x", want an array %[1]s`},
		{sdk.NewReply(int64(-3)), `decision reply: reply is the integer -3, want an array %[1]s`},
		{sdk.NewReply(strings.Repeat("z", 41)), `decision reply: reply is "` + strings.Repeat("z", 40) + `"…, want an array %[1]s`},
		{sdk.IntsReply(1, 2, 3), "decision reply: reply has 3 elements, want 6: %[1]s"},
		// A seventh element is not a delay: the script declares six.
		{sdk.IntsReply(1, 2, 3, 4, 5, 0, 7), "decision reply: reply has 7 elements, want 6: %[1]s"},
		{sdk.IntsReply(2, 2, 3, 4, 5, 0), `decision reply: reply element "allowed" is 2, want 1 or 0`},
		{sdk.NewReply([]any{int64(1), int64(1), int64(1), "12", "x", int64(0)}),
			`decision reply: reply element "reset_us": sdk: reply "x" is not an integer`},
		{sdk.NewReply([]any{int64(1), int64(1), int64(1), "12", strings.Repeat("y", 70000), int64(0)}),
			`decision reply: reply element "reset_us": sdk: reply "` + strings.Repeat("y", 70000) + `" is not an integer`},
	} {
		if strings.Contains(tc.want, "%[1]s") {
			tc.want = fmt.Sprintf(tc.want, "{allowed, granted, limit, remaining, reset_us, retry_after_us}")
		}
		_, err := w.Decide(context.Background(), &stubHost{reply: tc.reply}, cfg, sdk.Request{Subject: "s", Hits: 1})
		_, errN := sdk.DecisionFromReply(tc.reply, time.Second)
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) || errN == nil || errN.Error() != tc.want {
			t.Errorf("reply %v: error %v, want %s (native: %v)", tc.reply, err, tc.want, errN)
		}
	}
	// Elements may be strings that parse as integers.
	long := sdk.NewReply([]any{int64(1), int64(2), int64(3), "4", int64(5), int64(0)})
	d, err := w.Decide(context.Background(), &stubHost{reply: long}, cfg, sdk.Request{Subject: "s", Hits: 1})
	want := sdk.Decision{Allowed: true, Granted: 2, Limit: 3, Remaining: 4, Window: time.Second, Reset: 5 * time.Microsecond}
	if err != nil || d != want {
		t.Errorf("decision %+v %v, want %+v", d, err, want)
	}
	if s := w.Stats(); s.Discarded != 0 {
		t.Errorf("%+v: instances were discarded", s)
	}
}

// TestMemoryStaysFlat runs 100,000 decisions through the driver, with dedup ids, attributes, long
// subjects, failing Redis calls, replies too long for the first reply buffer and refused configs
// among them, and checks that the instance's memory does not grow once its buffers have their
// size.
func TestMemoryStaysFlat(t *testing.T) {
	p := load(t, asModule, wasm.Options{PoolSize: 1, Prewarm: 1})
	cfg := plugintest.Configure(t, p, map[string]any{"limit": 10, "window": "1s"})
	ok := &stubHost{reply: sdk.IntsReply(1, 1, 10, 9, 1000000, 0)}
	failing := &stubHost{err: errors.New("redis: i/o timeout")}
	huge := &stubHost{reply: sdk.NewReply([]any{int64(1), strings.Repeat("z", 5000)})}
	long := strings.Repeat("s", 3000)
	run := func(from, to int) {
		for i := from; i < to; i++ {
			req := sdk.Request{Subject: "subject", Hits: int64(i%7 - 2), DedupID: fmt.Sprintf("d%d", i), Attrs: map[string]string{"i": "x"}}
			var h sdk.Host = ok
			switch i % 10 {
			case 1:
				req.Subject, req.DedupID = long, long
			case 2:
				h = failing
			case 3:
				h = huge
			}
			_, err := p.Decide(context.Background(), h, cfg, req)
			if (err != nil) != (h != ok) {
				t.Fatalf("decision %d: %v", i, err)
			}
			if i%100 == 0 {
				if _, err := p.Configure(map[string]any{"limit": 0, "window": "x", "typo": []any{1.5, "y"}}); err == nil {
					t.Fatal("a bad config was accepted")
				}
			}
		}
	}
	run(0, 10_000) // buffers reach their size
	before := p.Stats().MaxMemory
	run(10_000, 100_000)
	after := p.Stats()
	t.Logf("instance memory after 10,000 decisions: %d bytes; after 100,000: %d bytes", before, after.MaxMemory)
	if after.MaxMemory != before {
		t.Errorf("instance memory grew from %d to %d bytes", before, after.MaxMemory)
	}
	if after.Created != 1 || after.Discarded != 0 {
		t.Errorf("%+v: the instance was replaced", after)
	}
}
