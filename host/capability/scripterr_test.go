package capability_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/internal/testkit/redistest"
	"github.com/ruled-dev/ruled/sdk"
)

// lines returns a script of n lines whose line i (from 1) is at[i], or a
// harmless assignment.
func lines(n int, at map[int]string) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		if s, ok := at[i]; ok {
			b.WriteString(s)
		} else {
			b.WriteString("local v" + strconv.Itoa(i) + " = " + strconv.Itoa(i))
		}
		if i < n {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// scriptErrOf returns err's *capability.ScriptError, failing the test when
// err is not a ClassScript error holding one.
func scriptErrOf(t *testing.T, what string, err error) *capability.ScriptError {
	t.Helper()
	if capability.ClassOf(err) != capability.ClassScript {
		t.Fatalf("%s: %v, want class script", what, err)
	}
	var se *capability.ScriptError
	if !errors.As(err, &se) {
		t.Fatalf("%s: %v (%T), want a *capability.ScriptError", what, err, errors.Unwrap(err))
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		t.Fatalf("%s: Redis's error is no longer in the chain of %v", what, err)
	}
	return se
}

func TestRefusedCommandIsNamedAtTheScriptsOwnLine(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := newCap(t, srv, capability.Options{Timeout: time.Second, Isolation: isolation(t, srv)})
	const line = 41
	p, err := c.Register("lines", []sdk.Script{
		{Name: "decide", Commands: []string{"INCR"}, Source: lines(45, map[int]string{
			3:    "local n = redis.call('INCR', KEYS[1])",
			line: "local h = redis.call('INCR', KEYS[1]) + redis.call(\"hincrby\", KEYS[2], 'f', 1)",
			45:   "return n",
		})},
		{Name: "pcalled", Commands: []string{"INCR"}, Source: lines(5, map[int]string{
			2: "local r = redis.pcall('HSET', KEYS[1], 'f', 1)",
			5: "return r",
		})},
		{Name: "dynamic", Commands: []string{"INCR"}, Source: lines(4, map[int]string{
			2: "local cmd = 'HSET'",
			4: "return redis.call(cmd, KEYS[1], 'f', 1)",
		})},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Isolated() {
		t.Fatal("plugin not isolated")
	}
	h := p.Host("r", "s")

	_, err = h.Eval(ctx, "decide", []string{"n", "h"})
	se := scriptErrOf(t, "decide", err)
	want := `script "decide" line 41: command HINCRBY is not allowed (declare it in Script.Commands)`
	if se.Line != line || se.Command != "HINCRBY" || !strings.Contains(err.Error(), want) {
		t.Fatalf("decide: %v (line %d, command %q), want %q", err, se.Line, se.Command, want)
	}
	refs := regexp.MustCompile(`user_script:(\d+)`).FindAllStringSubmatch(err.Error(), -1)
	if len(refs) == 0 {
		t.Fatalf("decide: Redis's line reference is gone: %v", err)
	}
	for _, r := range refs {
		if r[1] != "41" {
			t.Fatalf("decide: Redis's line reference %s is not the script's own 41: %v", r[0], err)
		}
	}
	// As before: the text says what Redis said (7.0 and 7.2+ word it differently).
	if !strings.Contains(err.Error(), "user executing the script can't") && !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("decide: Redis's words are gone: %v", err)
	}
	if n, _ := srv.Client().Get(ctx, "ruled:lines:r:{s}:n").Int64(); n != 2 {
		t.Fatalf("the script's first line 41 INCR did not run before the refusal: n = %d", n)
	}

	// A refusal caught by pcall and returned carries no line on 7.0: the
	// only undeclared command in the source is named.
	_, err = h.Eval(ctx, "pcalled", []string{"p"})
	se = scriptErrOf(t, "pcalled", err)
	if se.Command != "HSET" || !strings.Contains(err.Error(), "command HSET is not allowed") {
		t.Fatalf("pcalled: %v, want HSET named", err)
	}

	// A command held in a variable cannot be read from the line: say so.
	_, err = h.Eval(ctx, "dynamic", []string{"d"})
	se = scriptErrOf(t, "dynamic", err)
	if se.Command != "" || se.Line != 4 || !strings.Contains(err.Error(), `script "dynamic" line 4: a command it may not run was refused; which one could not be read`) {
		t.Fatalf("dynamic: %v (line %d, command %q)", err, se.Line, se.Command)
	}
}

func TestScriptErrorsCountTheScriptsOwnLines(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	for _, iso := range []bool{false, true} {
		t.Run("isolation="+strconv.FormatBool(iso), func(t *testing.T) {
			o := capability.Options{Timeout: time.Second}
			if iso {
				o.Isolation = isolation(t, srv)
			}
			p, err := newCap(t, srv, o).Register("lua"+strconv.FormatBool(iso)[:1], []sdk.Script{
				{Name: "runtime", Commands: []string{"INCR"}, Source: lines(12, map[int]string{
					7:  "local t = nil",
					9:  "local x = t.field",
					12: "return 1",
				})},
				{Name: "raised", Source: lines(3, map[int]string{2: "error('over the limit')"})},
				{Name: "noparse", Source: lines(6, map[int]string{5: "local = 3"})},
				{Name: "unclosed", Source: lines(4, map[int]string{4: "return (1"})},
			})
			if err != nil {
				t.Fatal(err)
			}
			h := p.Host("r", "s")
			for _, c := range []struct {
				script string
				line   int
				text   string
			}{
				{"runtime", 9, `script "runtime" line 9: ERR user_script:9: attempt to index local 't'`},
				{"raised", 2, `script "raised" line 2: ERR user_script:2: over the limit`},
				{"noparse", 5, `script "noparse" line 5: ERR Error compiling script (new function): user_script:5:`},
				{"unclosed", 4, `script "unclosed" at its end: ERR Error compiling script (new function): user_script:5 (end of script)`},
			} {
				_, err := h.Eval(ctx, c.script, nil)
				se := scriptErrOf(t, c.script, err)
				if se.Line != c.line || !strings.Contains(err.Error(), c.text) {
					t.Errorf("%s: %v (line %d), want line %d and %q", c.script, err, se.Line, c.line, c.text)
				}
			}
			// Preload compiles every script: the same lines.
			err = p.Preload(ctx)
			se := scriptErrOf(t, "preload", err)
			if !strings.Contains(err.Error(), "user_script:5") || se.Line < 4 {
				t.Fatalf("preload: %v (line %d)", err, se.Line)
			}
		})
	}
}
