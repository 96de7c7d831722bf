package capability

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ScriptError is the error of a declared script that Redis ran or compiled
// and that failed: a Lua runtime or compile error, or a command or key its
// ACL user may not use. Its text counts lines as the plugin's own source
// does (Redis counts the lines of the first line and prelude that Source
// puts before it) and, for a refused command, names the command. Unwrap
// returns Redis's own error, unchanged.
type ScriptError struct {
	// Script is the declared script's name.
	Script string
	// Line is the line of the plugin's source the error is on (its last
	// line for an error at its end), or 0 when Redis named none or the
	// line is not in the plugin's source.
	Line int
	// Command is the refused command (upper case), or "" when the error is
	// not a refused command or the command could not be determined.
	Command string
	msg     string
	err     error
}

func (e *ScriptError) Error() string { return e.msg }

// Unwrap returns Redis's error, with Redis's line numbers.
func (e *ScriptError) Unwrap() error { return e.err }

// userScriptRE matches Redis's references to a line of a script:
// "user_script:N" in Lua's messages, "@user_script:N" after "on".
var userScriptRE = regexp.MustCompile(`user_script:(\d+)`)

// callRE matches a redis.call or redis.pcall whose command is a literal.
var callRE = regexp.MustCompile(`redis\.p?call\s*\(\s*(?:'([^']*)'|"([^"]*)")`)

// noPermRunRE captures the command of Redis 7.2's "NOPERM User u has no
// permissions to run the 'cmd' command".
var noPermRunRE = regexp.MustCompile(`permissions to run the '([^']+)' command`)

// scriptErrors replaces the error of a capability *Error of ClassScript
// with scriptErr's; it returns err.
func (s *script) scriptErrors(name string, err error) error {
	var ce *Error
	if errors.As(err, &ce) && ce.Class == ClassScript {
		ce.Err = s.scriptErr(name, ce.Err)
	}
	return err
}

// scriptErr returns err, when it is an error reply of the script s's, as a
// *ScriptError that counts lines in the plugin's own source and names a
// refused command; any other err unchanged. Only errors classified
// ClassScript come here: a refusal of EVALSHA itself is ClassIsolation.
func (s *script) scriptErr(name string, err error) error {
	var rerr redis.Error
	if err == nil || !errors.As(err, &rerr) || errors.As(err, new(*ScriptError)) {
		return err
	}
	msg := rerr.Error()
	refusedCmd := strings.Contains(msg, "can't run this command") || noPermRunRE.MatchString(msg)
	refusedKey := strings.Contains(msg, "can't access at least one of the keys") ||
		strings.Contains(msg, "NOPERM") && strings.Contains(msg, "access") && strings.Contains(msg, "key")
	if !refusedCmd && !refusedKey && !userScriptRE.MatchString(msg) {
		return err // not about the script's source (BUSY, OOM, TOOLARGE, ...)
	}
	se := &ScriptError{Script: name, err: err}
	line, end := 0, false
	own := userScriptRE.ReplaceAllStringFunc(msg, func(ref string) string {
		n, _ := strconv.Atoi(ref[len("user_script:"):])
		m := n - s.headLines
		switch {
		case m < 1:
			return "ruled_prelude:" + strconv.Itoa(n-1) // the first line names the script
		case m > s.bodyLines:
			if line == 0 {
				line, end = s.bodyLines, true
			}
			return "user_script:" + strconv.Itoa(m) + " (end of script)"
		}
		if line == 0 {
			line = m
		}
		return "user_script:" + strconv.Itoa(m)
	})
	se.Line = line
	where := fmt.Sprintf("script %q", name)
	switch {
	case end:
		where += " at its end" // a compile error: an unclosed block, say
	case line > 0:
		where += " line " + strconv.Itoa(line)
	}
	switch {
	case refusedCmd:
		se.Command = s.refusedCommand(msg, line)
		switch {
		case se.Command != "":
			se.msg = fmt.Sprintf("%s: command %s is not allowed (declare it in Script.Commands): %s", where, se.Command, own)
		case line == 0:
			se.msg = fmt.Sprintf("%s: a command it may not run was refused; Redis named neither the command nor the line, and the source runs no undeclared command by name (declare every command in Script.Commands): %s", where, own)
		default:
			se.msg = fmt.Sprintf("%s: a command it may not run was refused; which one could not be read from the line (declare every command in Script.Commands): %s", where, own)
		}
	case refusedKey:
		se.msg = fmt.Sprintf("%s: a key outside the plugin's namespace was refused (pass every key in KEYS): %s", where, own)
	default:
		se.msg = where + ": " + own
	}
	return se
}

// refusedCommand returns the command a refusal is about: the one Redis
// names, else the first undeclared literal command of redis.call or
// redis.pcall on the line (or the first of any when all are declared, as a
// refused subcommand's is), else, when Redis named no line, the only
// undeclared literal command in the whole source; "" when none of these.
func (s *script) refusedCommand(msg string, line int) string {
	if m := noPermRunRE.FindStringSubmatch(msg); m != nil {
		return strings.ToUpper(m[1])
	}
	if line > 0 {
		lines := strings.Split(s.body, "\n")
		if line > len(lines) {
			return ""
		}
		cmds := literalCommands(lines[line-1])
		for _, c := range cmds {
			if !s.declared(c) {
				return c
			}
		}
		if len(cmds) > 0 {
			return cmds[0]
		}
		return ""
	}
	var undeclared []string
	for _, c := range literalCommands(s.body) {
		if !s.declared(c) && !slices.Contains(undeclared, c) {
			undeclared = append(undeclared, c)
		}
	}
	if len(undeclared) == 1 {
		return undeclared[0]
	}
	return ""
}

// literalCommands returns, upper case and in order, the commands that
// redis.call and redis.pcall name with a literal in src.
func literalCommands(src string) []string {
	var cmds []string
	for _, m := range callRE.FindAllStringSubmatch(src, -1) {
		cmds = append(cmds, strings.ToUpper(m[1]+m[2]))
	}
	return cmds
}

// declared reports whether the script may run cmd: it declared it, or
// every plugin user may (connectionCommands).
func (s *script) declared(cmd string) bool {
	if slices.Contains(connectionCommands, strings.ToLower(cmd)) {
		return true
	}
	for _, c := range s.commands {
		if strings.EqualFold(c, cmd) {
			return true
		}
	}
	return false
}
