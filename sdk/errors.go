package sdk

import (
	"errors"
	"fmt"
)

// BadRequestError is a plugin's refusal of a request as bad input (an
// attribute it needs is missing, hits it cannot take): the client gets the
// message as a 400, not the rule's on_error outcome, because asking again
// unchanged cannot succeed.
type BadRequestError struct {
	// Message says what is wrong with the request.
	Message string
}

// Error implements error.
func (e *BadRequestError) Error() string { return "bad request: " + e.Message }

// BadRequest returns a BadRequestError with a formatted message, for Decide
// to return.
func BadRequest(format string, args ...any) error {
	return &BadRequestError{Message: fmt.Sprintf(format, args...)}
}

// IsBadRequest reports whether err is, or wraps, a BadRequestError.
func IsBadRequest(err error) bool {
	var bad *BadRequestError
	return errors.As(err, &bad)
}
