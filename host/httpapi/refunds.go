package httpapi

import (
	"fmt"
	"net/http"
)

// Refunds says which clients may give quota back: checks with negative
// hits, and lease returns.
type Refunds int

// The refund policies (serve --client-refunds).
const (
	// RefundsAllow takes refunds from any client that reaches the API.
	RefundsAllow Refunds = iota
	// RefundsAdmin takes refunds only from requests with the admin token
	// (Authorization: Bearer <token>).
	RefundsAdmin
	// RefundsDeny takes no refund.
	RefundsDeny
)

// ParseRefunds reads allow, admin or deny.
func ParseRefunds(s string) (Refunds, error) {
	switch s {
	case "allow":
		return RefundsAllow, nil
	case "admin":
		return RefundsAdmin, nil
	case "deny":
		return RefundsDeny, nil
	}
	return 0, fmt.Errorf("want allow, admin or deny, got %q", s)
}

// String is the policy's name, as ParseRefunds reads it.
func (p Refunds) String() string {
	switch p {
	case RefundsAdmin:
		return "admin"
	case RefundsDeny:
		return "deny"
	}
	return "allow"
}

// refundRefused is nil when r may give quota back, else the 403 to answer;
// what names the refund in the message.
func (s *Server) refundRefused(r *http.Request, what string) *Error {
	switch s.refunds {
	case RefundsAllow:
		return nil
	case RefundsAdmin:
		if hasToken(r, s.adminToken) {
			return nil
		}
		return &Error{Status: http.StatusForbidden, Code: "refunds_refused",
			Message: what + ": refunds need Authorization: Bearer <admin token> (--client-refunds=admin)"}
	}
	return &Error{Status: http.StatusForbidden, Code: "refunds_refused", Message: what + ": refunds are refused (--client-refunds=deny)"}
}
