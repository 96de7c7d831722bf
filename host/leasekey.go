package host

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// The fleet's lease key: every instance sharing a Redis signs the lease
// strings it gives clients with one HMAC-SHA256 key kept in that Redis,
// under ruled's own prefix (keyName), so that a lease taken from one
// instance can be returned to another and a client cannot forge or change
// one. No plugin's ACL user can read it.
const (
	// LeaseKeyBytes is the size of a lease key ruled creates.
	LeaseKeyBytes = 32
	// leaseKeyRefresh is how long an instance signs with the key it read
	// before it reads it again: after an operator replaced the key, every
	// instance signs with the new one within this time.
	leaseKeyRefresh = 10 * time.Second
	// leaseKeyReread is the least time between two reads of the key caused
	// by a MAC that did not verify: forged leases cost at most one Redis
	// call per instance per leaseKeyReread.
	leaseKeyReread = time.Second
	// minLeaseKeyBytes is the shortest key accepted from Redis.
	minLeaseKeyBytes = 16
	// leaseMACContext separates lease MACs from any other use of the key.
	leaseMACContext = "ruled lease v1\x00"
)

// ErrLeaseForged is the error of a lease string whose MAC does not verify
// under the fleet's lease key: not given by this fleet, changed, or given
// under a key that was since replaced.
var ErrLeaseForged = errors.New("not a lease this fleet gave, or changed since (its signature does not verify)")

// errLeaseKeyShort is the error of a key in Redis too short to be one:
// put there by hand, it is refused rather than signed with.
var errLeaseKeyShort = errors.New("too short")

// leaseKeyScript creates the key when there is none (ARGV[1], random) and
// returns the key in use: one call, whichever instance comes first.
var leaseKeyScript = redis.NewScript(`
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
`)

// leaseKey caches the fleet's lease key.
type leaseKey struct {
	mu     sync.Mutex
	key    []byte
	readAt time.Time
}

// keyName is the Redis key that holds the fleet's lease key.
func (cl *ClientLeases) keyName() string { return cl.e.cap.Prefix() + ":lease-key" }

// LoadKey reads the fleet's lease key from Redis, creating it when
// there is none, and caches it. The daemon calls it at start; signing and
// verifying call it when the cached key is missing or old.
func (cl *ClientLeases) LoadKey(ctx context.Context) error {
	cl.key.mu.Lock()
	defer cl.key.mu.Unlock()
	_, err := cl.loadLeaseKeyLocked(ctx)
	return err
}

// loadLeaseKeyLocked reads the key; cl.key.mu is held.
func (cl *ClientLeases) loadLeaseKeyLocked(ctx context.Context) ([]byte, error) {
	e := cl.e
	fresh := make([]byte, LeaseKeyBytes)
	_, _ = rand.Read(fresh) // never fails (crypto/rand)
	ctx, cancel := context.WithTimeout(ctx, e.cap.Timeout())
	defer cancel()
	v, err := leaseKeyScript.Run(ctx, e.cap.Client(), []string{cl.keyName()}, fresh).Text()
	if err != nil {
		return nil, fmt.Errorf("lease key %s: %w", cl.keyName(), err)
	}
	if len(v) < minLeaseKeyBytes {
		return nil, fmt.Errorf("lease key %s: %d bytes in Redis, want at least %d (delete it and ruled creates one): %w",
			cl.keyName(), len(v), minLeaseKeyBytes, errLeaseKeyShort)
	}
	cl.key.key, cl.key.readAt = []byte(v), e.now()
	return cl.key.key, nil
}

// currentLeaseKey is the cached key, read again when older than
// leaseKeyRefresh. When Redis fails that read, the cached key goes on
// serving and the next read is tried leaseKeyReread later: while Redis
// does not answer, callers do not queue behind one time-out after another.
func (cl *ClientLeases) currentLeaseKey(ctx context.Context) ([]byte, error) {
	e := cl.e
	cl.key.mu.Lock()
	defer cl.key.mu.Unlock()
	if cl.key.key != nil && e.now().Sub(cl.key.readAt) < leaseKeyRefresh {
		return cl.key.key, nil
	}
	key, err := cl.loadLeaseKeyLocked(ctx)
	if err != nil && cl.key.key != nil && !errors.Is(err, errLeaseKeyShort) {
		cl.key.readAt = e.now().Add(leaseKeyReread - leaseKeyRefresh)
		return cl.key.key, nil
	}
	return key, err
}

// leaseMAC is data's HMAC-SHA256 under key.
func leaseMAC(key, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(leaseMACContext))
	m.Write(data)
	return m.Sum(nil)
}

// Sign returns the MAC of a lease string's contents under the fleet's
// lease key. It fails when the key cannot be read from Redis.
func (cl *ClientLeases) Sign(ctx context.Context, data []byte) ([]byte, error) {
	key, err := cl.currentLeaseKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("sign lease: %w", err)
	}
	return leaseMAC(key, data), nil
}

// Verify checks that mac is data's MAC under the fleet's lease key,
// and answers ErrLeaseForged when it is not. When the cached key does not
// verify it, the key is read again (at most once per leaseKeyReread), so
// that a key another instance created after a rotation is picked up.
func (cl *ClientLeases) Verify(ctx context.Context, data, mac []byte) error {
	key, err := cl.currentLeaseKey(ctx)
	if err != nil {
		return fmt.Errorf("verify lease: %w", err)
	}
	if hmac.Equal(mac, leaseMAC(key, data)) {
		return nil
	}
	cl.key.mu.Lock()
	defer cl.key.mu.Unlock()
	if cl.e.now().Sub(cl.key.readAt) >= leaseKeyReread {
		if key, err = cl.loadLeaseKeyLocked(ctx); err != nil {
			return fmt.Errorf("verify lease: %w", err)
		}
	} else {
		key = cl.key.key // another call may have read it meanwhile
	}
	if hmac.Equal(mac, leaseMAC(key, data)) {
		return nil
	}
	return ErrLeaseForged
}
