package host

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Sealer signs data with the fleet's lease key and verifies it
// (*ClientLeases is one).
type Sealer interface {
	Sign(ctx context.Context, data []byte) ([]byte, error)
	// Verify answers ErrLeaseForged when mac is not data's MAC.
	Verify(ctx context.Context, data, mac []byte) error
}

// ErrNotSealed is the error of a string whose parts are not base64url: not
// a sealed string at all.
var ErrNotSealed = errors.New("not a signed string")

// Seal returns data and its MAC under the fleet's lease key, each in
// unpadded base64url, joined by a dot: a string a client carries back
// (a client lease, a release token) and cannot forge or change. The MAC
// covers kind followed by data, so that a string sealed as one kind never
// passes for another (client leases, which came first, have kind "").
func Seal(ctx context.Context, s Sealer, kind string, data []byte) (string, error) {
	mac, err := s.Sign(ctx, append([]byte(kind), data...))
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(data) + "." + base64.RawURLEncoding.EncodeToString(mac), nil
}

// Unseal returns the data of str, sealed as kind, once its MAC verifies:
// ErrLeaseForged when it does not (or str has no dot), an error wrapping
// ErrNotSealed when a part is not base64url.
func Unseal(ctx context.Context, s Sealer, kind, str string) ([]byte, error) {
	body, sig, ok := strings.Cut(str, ".")
	if !ok {
		return nil, ErrLeaseForged
	}
	data, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotSealed, err)
	}
	mac, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %w", ErrNotSealed, err)
	}
	if err := s.Verify(ctx, append([]byte(kind), data...), mac); err != nil {
		return nil, err
	}
	return data, nil
}
