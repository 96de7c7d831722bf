package capability

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// Class says what kind of failure an Error is, so that the engine can apply
// a rule's failure policy and metrics can count failures by kind.
type Class string

// Failure classes.
const (
	// ClassTimeout: the call did not finish within the time-out.
	ClassTimeout Class = "timeout"
	// ClassConnection: Redis could not be reached or the connection broke.
	ClassConnection Class = "connection"
	// ClassScript: Redis ran the script and it failed (a Lua error, a bad
	// argument, a permission the plugin's ACL user lacks): a plugin bug.
	ClassScript Class = "script"
	// ClassRefused: the host refused the call (undeclared script, bad key,
	// a reply over MaxReplyBytes): a plugin bug.
	ClassRefused Class = "refused"
	// ClassIsolation: the plugin's ACL user is missing or wrong on the node
	// and ruled could not set it up; the script did not run.
	ClassIsolation Class = "isolation"
	// ClassBusy: Redis is busy running a script past its time limit (BUSY)
	// and refuses other commands until the script ends or is killed.
	ClassBusy Class = "busy"
	// ClassOOM: Redis refused a write because it is at maxmemory (OOM).
	ClassOOM Class = "oom"
	// ClassQuarantine: the plugin is quarantined because one of its scripts
	// kept Redis busy (the watchdog stopped it); the script did not run.
	ClassQuarantine Class = "quarantine"
)

// Error is a failed capability call.
type Error struct {
	Class  Class
	Plugin string
	Script string
	Err    error
}

func (e *Error) Error() string {
	if e.Plugin == "" { // ruled's own call (the health probe), no plugin's
		return fmt.Sprintf("capability: %s: %s: %v", e.Script, e.Class, e.Err)
	}
	if e.Script == "" {
		return fmt.Sprintf("capability: plugin %s: %s: %v", e.Plugin, e.Class, e.Err)
	}
	return fmt.Sprintf("capability: plugin %s, script %s: %s: %v", e.Plugin, e.Script, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the class of err, or "" when err is not a capability error.
func ClassOf(err error) Class {
	if err == nil {
		return "" // and no allocation: errors.As's target escapes
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Class
	}
	return ""
}

// Unavailable reports whether err means Redis could not answer (time-out or
// connection failure), as opposed to a plugin or script fault.
func Unavailable(err error) bool {
	c := ClassOf(err)
	return c == ClassTimeout || c == ClassConnection
}

func classify(plugin, script string, err error) error {
	e := &Error{Plugin: plugin, Script: script, Err: err}
	var netErr net.Error
	var rerr redis.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		e.Class = ClassTimeout
	case errors.Is(err, context.Canceled):
		e.Class = ClassTimeout
	case errors.As(err, &rerr) && !isConnReply(err):
		e.Class = replyClass(err)
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, redis.ErrClosed), errors.As(err, &netErr), isConnReply(err):
		e.Class = ClassConnection
	default:
		e.Class = ClassConnection
	}
	return e
}

// replyClass is the class of an error reply that does not mean "Redis is
// not available": a plugin bug unless it names the user, BUSY or OOM.
func replyClass(err error) Class {
	switch {
	case authFailure(err):
		return ClassIsolation
	case redis.HasErrorPrefix(err, "BUSY"):
		return ClassBusy
	case redis.HasErrorPrefix(err, "OOM"):
		return ClassOOM
	case redis.HasErrorPrefix(err, "TOOLARGE"):
		return ClassRefused // the reply cap, MaxReplyBytes
	}
	return ClassScript
}

// authFailure reports replies that say the connection's user is missing
// or may not run the call itself: WRONGPASS at AUTH (the user does not
// exist on this node), or NOPERM for the EVALSHA/EVAL command line.
// A permission error raised inside a script is a plugin's (ClassScript).
func authFailure(err error) bool {
	if redis.HasErrorPrefix(err, "WRONGPASS") {
		return true
	}
	if !redis.HasErrorPrefix(err, "NOPERM") {
		return false
	}
	msg := err.Error()
	return (strings.Contains(msg, "'evalsha'") || strings.Contains(msg, "'eval'")) && !strings.Contains(msg, "script:")
}

// aclDenied reports any ACL refusal, at AUTH, for the command line or
// inside a script (Redis 7.0 words the last one differently from 7.2).
func aclDenied(err error) bool {
	if authFailure(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "user executing the script can't")
}

// isConnReply reports server replies that mean "not available right now"
// rather than "the script is wrong".
func isConnReply(err error) bool {
	msg := err.Error()
	for _, p := range []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
