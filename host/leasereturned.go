package host

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A client lease is credited at most once: its return marks it returned
// in Redis with SET NX, and only the return that set the mark gives units
// back. The marks live under ruled's own prefix, outside every plugin's
// key space (a plugin name cannot start with "_", so no plugin's ACL user
// can reach them), and expire a little after the lease's deadline, past
// which no instance takes a return of it anyway.
const (
	// leaseIDBytes is the randomness of a lease id: 128 bits.
	leaseIDBytes = 16
	// maxLeaseID bounds the length of a lease id in a return.
	maxLeaseID = 64
	// LeaseReturnedTTL is how long past its lease's deadline a return mark
	// is kept: longer than any instance takes a return of it, even with
	// its clock this far behind the marking instance's.
	LeaseReturnedTTL = 10 * time.Second
)

// ErrLeaseReturned is the error of a return whose lease was returned
// before, to this instance or another of the fleet: it gives nothing back.
var ErrLeaseReturned = errors.New("lease return: this lease was returned before; a lease is credited once")

// NewLeaseID returns a random lease id: 128 bits, unpadded base64url.
func NewLeaseID() string {
	b := make([]byte, leaseIDBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// ValidLeaseID reports whether id can name a lease: 1 to 64 bytes of
// base64url, as NewLeaseID makes them.
func ValidLeaseID(id string) bool {
	if id == "" || len(id) > maxLeaseID {
		return false
	}
	for i := range len(id) {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// returnedKey is the Redis key that marks the lease id returned.
func (cl *ClientLeases) returnedKey(id string) string {
	return cl.e.cap.Prefix() + ":_lease-returned:" + id
}

// markReturned marks the leases of rets[claims[k]] returned, in one
// pipeline of SET NX (one round trip; on a Cluster, one per master). It
// answers, for each claim, nil when this call set the mark and
// ErrLeaseReturned when it was set before (a lease named twice in rets is
// credited the first time); err when the pipeline failed as a whole. A
// mark whose command failed answers that command's error: whether it was
// set is unknown, so that lease gives nothing back.
func (cl *ClientLeases) markReturned(ctx context.Context, start time.Time, rets []*LeaseReturn, claims []int) (first []error, err error) {
	e := cl.e
	ctx, cancel := context.WithDeadline(ctx, newBudget(ctx, start, e.timeout).deadline)
	defer cancel()
	cmds := make([]*redis.BoolCmd, len(claims))
	_, err = e.cap.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range claims {
			ret := rets[i]
			ttl := max(ret.Deadline.Sub(start), 0) + LeaseReturnedTTL
			cmds[k] = p.SetNX(ctx, cl.returnedKey(ret.ID), 1, ttl)
		}
		return nil
	})
	first = make([]error, len(claims))
	failed := 0
	for k, c := range cmds {
		switch set, cerr := c.Result(); {
		case cerr != nil:
			first[k] = fmt.Errorf("lease return: marking lease %s returned: %w", rets[claims[k]].ID, cerr)
			failed++
		case !set:
			first[k] = ErrLeaseReturned
		}
	}
	if err != nil && failed == len(cmds) {
		return nil, fmt.Errorf("lease return: marking %d leases returned: %w", len(cmds), err)
	}
	return first, nil
}
