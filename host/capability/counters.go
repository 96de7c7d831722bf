package capability

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ruled-dev/ruled/sdk"
)

// ScanCount is the COUNT of each SCAN call that lists or clears a rule's
// keys: about how many keys of the keyspace (any keys, not only the rule's)
// one call examines.
const ScanCount = 100

// MaxScanCalls bounds the SCAN calls of one page of ScanSubjects: a page
// examines about MaxScanCalls × ScanCount keys of the keyspace at most,
// however large it is, and may hold fewer subjects than asked for (none,
// even) with a cursor to go on from.
const MaxScanCalls = 20

// minAdminCallTimeout is the least time-out of one SCAN or UNLINK call
// made for the admin API: not a decision, so not bound by the capability's
// (often much shorter) time-out.
const minAdminCallTimeout = time.Second

// ErrBadCursor is the error of a cursor that ScanSubjects did not return.
var ErrBadCursor = errors.New("capability: not a cursor of a subject scan")

// Subject is one subject that a rule holds keys for, as ScanSubjects finds
// it.
type Subject struct {
	// Name is the subject as the rule computed it. When Hashed is set it is
	// Key instead.
	Name string
	// Key is the subject as keys hold it (EscapeSubject).
	Key string
	// Hashed is set when Key cannot be turned back into the subject: a
	// subject whose escaped form is longer than 128 bytes is stored as "#"
	// and a hash of it.
	Hashed bool
}

// SubjectPage is one page of a subject scan.
type SubjectPage struct {
	// Subjects are the subjects found, each once, in the order found.
	Subjects []Subject
	// Next is the cursor of the next page; "" when the scan is complete.
	Next string
}

// scanCursor is where a subject scan stands: the master (by its index in
// the address order of masters) and that master's SCAN cursor.
type scanCursor struct {
	node int
	scan uint64
}

func (c scanCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte("1:" + strconv.Itoa(c.node) + ":" + strconv.FormatUint(c.scan, 10)))
}

func decodeCursor(s string) (scanCursor, error) {
	if s == "" {
		return scanCursor{}, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return scanCursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	parts := strings.Split(string(raw), ":")
	if len(parts) != 3 || parts[0] != "1" {
		return scanCursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	node, err1 := strconv.Atoi(parts[1])
	scan, err2 := strconv.ParseUint(parts[2], 10, 64)
	if err1 != nil || err2 != nil || node < 0 {
		return scanCursor{}, fmt.Errorf("%w: %q", ErrBadCursor, s)
	}
	return scanCursor{node: node, scan: scan}, nil
}

// masters returns the masters client serves, in a fixed order (by
// address): each of a Cluster's, else the client itself.
func masters(ctx context.Context, client redis.UniversalClient) ([]*redis.Client, error) {
	var mu sync.Mutex
	var out []*redis.Client
	err := forEachMaster(ctx, client, func(_ context.Context, node *redis.Client) error {
		mu.Lock()
		out = append(out, node)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *redis.Client) int { return strings.Compare(nodeName(a), nodeName(b)) })
	return out, nil
}

// rulePattern is the SCAN pattern of every key of rule: "<prefix>:<plugin>:<rule>:{*".
func (p *Plugin) rulePattern(rule string) string {
	return globEscape(p.ns+rule+":{") + "*"
}

// adminTimeout is the time-out of one SCAN or UNLINK call of the admin API.
func (p *Plugin) adminTimeout() time.Duration { return p.cap.adminTimeout() }

// adminTimeout is the time-out of one SCAN or UNLINK call of the admin API.
func (c *Capability) adminTimeout() time.Duration { return max(c.timeout, minAdminCallTimeout) }

// ScanSubjects returns one page of the subjects that rule holds keys for
// under this plugin, found with SCAN on every master in turn (the one node
// of a standalone or Sentinel deployment; each master of a Cluster).
// cursor is "" for the first page, else the Next of the page before.
//
// A page ends once it holds limit subjects (or a few more: the keys of one
// SCAN reply are never split) or after MaxScanCalls SCAN calls, whichever
// comes first, so its cost is bounded whatever the size of the keyspace.
// As with SCAN, a subject is listed once within a page but may be listed
// again on another page (its keys are found one by one), and a subject
// whose keys come or go during the scan may be missed. A cursor holds the
// master's position in the address order of masters: if masters change
// between pages, the scan may skip or repeat subjects.
func (p *Plugin) ScanSubjects(ctx context.Context, rule, cursor string, limit int) (SubjectPage, error) {
	cur, err := decodeCursor(cursor)
	if err != nil {
		return SubjectPage{}, err
	}
	limit = max(limit, 1)
	nodes, err := masters(ctx, p.cap.client)
	if err != nil {
		return SubjectPage{}, classify(p.name, "scan", fmt.Errorf("list the masters: %w", err))
	}
	prefix := p.ns + rule + ":{"
	pattern := p.rulePattern(rule)
	seen := map[string]bool{}
	var page SubjectPage
	for calls := 0; calls < MaxScanCalls && len(page.Subjects) < limit && cur.node < len(nodes); calls++ {
		node := nodes[cur.node]
		cctx, cancel := context.WithTimeout(ctx, p.adminTimeout())
		keys, next, err := node.Scan(cctx, cur.scan, pattern, ScanCount).Result()
		cancel()
		if err != nil {
			return SubjectPage{}, classify(p.name, "scan", fmt.Errorf("SCAN on %s: %w", nodeName(node), err))
		}
		for _, k := range keys {
			s, ok := subjectOfKey(k, prefix)
			if !ok || seen[s.Key] {
				continue
			}
			seen[s.Key] = true
			page.Subjects = append(page.Subjects, s)
		}
		if next == 0 {
			cur = scanCursor{node: cur.node + 1}
		} else {
			cur.scan = next
		}
	}
	if cur.node < len(nodes) {
		page.Next = cur.encode()
	}
	return page, nil
}

// HostForKey is HostUntil for a subject given as keys hold it (Subject.Key)
// rather than as the rule computed it, so that a hashed subject can be
// read too.
func (p *Plugin) HostForKey(rule, key string, deadline time.Time) sdk.Host {
	return &scopedHost{p: p, rule: rule, subject: key, deadline: deadline}
}

// Clear deletes every key of rule under this plugin (every subject's),
// found with SCAN on every master and removed with UNLINK, and returns how
// many it deleted. Its cost grows with the whole keyspace: SCAN examines
// every key of every master. Keys written while it runs may survive it.
func (p *Plugin) Clear(ctx context.Context, rule string) (int64, error) {
	n, err := p.cap.clear(ctx, p.rulePattern(rule))
	if err != nil {
		return n, classify(p.name, "clear", err)
	}
	return n, nil
}

// ClearAll deletes every key under the capability's prefix, of every
// plugin, as Clear does. ruled test --redis gives each run a prefix of its
// own and clears it when the run ends.
func (c *Capability) ClearAll(ctx context.Context) (int64, error) {
	n, err := c.clear(ctx, globEscape(c.prefix+":")+"*")
	if err != nil {
		return n, fmt.Errorf("capability: clearing %s:*: %w", c.prefix, err)
	}
	return n, nil
}

// clear deletes the keys that match pattern on every master.
func (c *Capability) clear(ctx context.Context, pattern string) (int64, error) {
	var deleted atomic.Int64
	err := forEachMaster(ctx, c.client, func(ctx context.Context, node *redis.Client) error {
		var cur uint64
		for {
			cctx, cancel := context.WithTimeout(ctx, c.adminTimeout())
			keys, next, err := node.Scan(cctx, cur, pattern, ScanCount).Result()
			cancel()
			if err != nil {
				return fmt.Errorf("SCAN on %s: %w", nodeName(node), err)
			}
			if len(keys) > 0 {
				n, err := c.unlink(ctx, node, keys)
				deleted.Add(n)
				if err != nil {
					return err
				}
			}
			if next == 0 {
				return nil
			}
			cur = next
		}
	})
	return deleted.Load(), err
}

// unlink removes keys from node in one pipeline of one UNLINK per key (a
// Cluster refuses a command whose keys are in different slots, and the keys
// of one SCAN reply are) and returns how many it removed.
func (c *Capability) unlink(ctx context.Context, node *redis.Client, keys []string) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, c.adminTimeout())
	defer cancel()
	cmds, err := node.Pipelined(cctx, func(pipe redis.Pipeliner) error {
		for _, k := range keys {
			pipe.Unlink(cctx, k)
		}
		return nil
	})
	var n int64
	for _, c := range cmds {
		if ic, ok := c.(*redis.IntCmd); ok && ic.Err() == nil {
			n += ic.Val()
		}
	}
	if err != nil {
		return n, fmt.Errorf("UNLINK on %s: %w", nodeName(node), err)
	}
	return n, nil
}
