package client

import (
	"errors"
	"fmt"
	"net"
)

// CodeInvalidAnswer is the Error code when ruled's answer could not be read
// as the API defines it (a proxy in between answering, a truncated body).
const CodeInvalidAnswer = "invalid_answer"

// Error is an answer from ruled that is not a decision: a 4xx with ruled's
// error body ({"error": {"code", "message"}}), a 5xx other than a
// fail-closed decision, or an answer that could not be read.
type Error struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Code is ruled's error code (invalid_json, invalid_field,
	// unknown_field, body_too_large, ...), CodeInvalidAnswer, or "" when
	// the body was not ruled's error body.
	Code string
	// Message says what went wrong.
	Message string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("ruled: HTTP %d: %s", e.StatusCode, e.Message)
	}
	return fmt.Sprintf("ruled: HTTP %d %s: %s", e.StatusCode, e.Code, e.Message)
}

// UnreachableError is a call that got no answer from ruled: it could not
// connect, the connection broke, or the call timed out or was cancelled.
// errors.Is(err, context.DeadlineExceeded) tells a time-out.
type UnreachableError struct {
	// Op is the call: "check", "acquire" or "batch"; "lease" for a Check
	// that got no lease (WithLeases) before its context ended.
	Op string
	// URL is the URL that was called.
	URL string
	// Err is the transport's error.
	Err error
}

// Error implements error.
func (e *UnreachableError) Error() string {
	return fmt.Sprintf("ruled %s: %s unreachable: %v", e.Op, e.URL, e.Err)
}

// Unwrap returns the transport's error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Timeout reports whether the call timed out.
func (e *UnreachableError) Timeout() bool {
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}
