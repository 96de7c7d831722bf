package rules

import (
	"fmt"
	"net/netip"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
)

// env is the typed expression environment. One is pooled per evaluating
// goroutine (see evalState); Header and Tick are bound to it once. Its
// unexported fields, which expressions cannot see, hold the evaluation
// budget of the rule being evaluated (see ExprBudget).
type env struct {
	Request *Request            `expr:"request"`
	Attrs   map[string]string   `expr:"attrs"`
	Header  func(string) string `expr:"header"`
	Tick    func() bool         `expr:"ruled:tick"` // see meterLoops

	ticks   int       // loop iterations so far
	started time.Time // when the first one ran
}

// maxPrefixes bounds the cache of parsed CIDRs that cidr() keeps per Set.
const maxPrefixes = 4096

// funcs holds the state of the helper functions of one Set: a cache of
// parsed CIDR prefixes, so that cidr() parses each distinct prefix once.
type funcs struct {
	mu       sync.RWMutex
	prefixes map[string]netip.Prefix
	loops    atomic.Int64 // names meterLoops' variables
}

func newFuncs() *funcs { return &funcs{prefixes: map[string]netip.Prefix{}} }

// options returns the expr options every rule expression is compiled with.
func (fs *funcs) options() []expr.Option {
	return []expr.Option{
		expr.Env(&env{}),
		expr.Function("cidr", fs.cidrFunc, new(func(ip, cidr string) bool)),
		expr.Function("glob", globFunc, new(func(path, pattern string) bool)),
		expr.Patch(lowerHeaderNames{}),
		expr.Patch(meterLoops{&fs.loops}),
		// Decisions depend on the request only; time comes from Redis.
		expr.DisableBuiltin("now"),
	}
}

func (fs *funcs) cidrFunc(args ...any) (any, error) {
	ip, _ := args[0].(string)
	cidr, _ := args[1].(string)
	p, err := fs.prefix(cidr)
	if err != nil {
		return false, err
	}
	return cidrContains(p, ip), nil
}

// prefix parses a CIDR ("10.0.0.0/8", "2001:db8::/32") or a single address
// (taken as a /32 or /128), from the cache when it can.
func (fs *funcs) prefix(s string) (netip.Prefix, error) {
	fs.mu.RLock()
	p, ok := fs.prefixes[s]
	fs.mu.RUnlock()
	if ok {
		return p, nil
	}
	p, err := parsePrefix(s)
	if err != nil {
		return p, err
	}
	fs.mu.Lock()
	if len(fs.prefixes) < maxPrefixes {
		fs.prefixes[s] = p
	}
	fs.mu.Unlock()
	return p, nil
}

func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("cidr: bad network %q: want a CIDR such as 10.0.0.0/8 or an address", s)
		}
		a = a.WithZone("").Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, fmt.Errorf("cidr: bad network %q: want a CIDR such as 10.0.0.0/8 or 2001:db8::/32", s)
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// cidrContains reports whether ip is in p. An address that does not parse
// (an empty request.ip, say) is in no network. IPv4-mapped IPv6 addresses
// match IPv4 networks.
func cidrContains(p netip.Prefix, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	return p.Contains(a.WithZone("").Unmap())
}

func globFunc(args ...any) (any, error) {
	name, _ := args[0].(string)
	pattern, _ := args[1].(string)
	ok, err := glob(pattern, name)
	if err != nil {
		return false, fmt.Errorf("glob: bad pattern %q", pattern)
	}
	return ok, nil
}

// glob matches name against pattern segment by segment (segments are
// separated by '/'), each with path.Match; a segment that is exactly "**"
// matches any number of segments, none included.
func glob(pattern, name string) (bool, error) {
	if !strings.Contains(pattern, "**") {
		return path.Match(pattern, name)
	}
	if err := checkGlob(pattern); err != nil {
		return false, err
	}
	return globSegments(pattern, name, true), nil
}

func checkGlob(pattern string) error {
	_, err := path.Match(pattern, "")
	return err
}

// globSegments matches pattern against name, both split at '/'. hasName
// is false when name has no segments left (as opposed to one empty one).
func globSegments(pattern, name string, hasName bool) bool {
	for {
		pseg, prest, pmore := strings.Cut(pattern, "/")
		if pseg == "**" {
			if !pmore {
				return true
			}
			for {
				if globSegments(prest, name, hasName) {
					return true
				}
				if !hasName {
					return false
				}
				_, name, hasName = strings.Cut(name, "/")
			}
		}
		if !hasName {
			return false
		}
		nseg, nrest, nmore := strings.Cut(name, "/")
		if ok, _ := path.Match(pseg, nseg); !ok {
			return false
		}
		if !pmore {
			return !nmore
		}
		pattern, name, hasName = prest, nrest, nmore
	}
}

// lowerHeaderNames lower-cases constant arguments of header() at compile
// time, so that the run-time lookup does not allocate.
type lowerHeaderNames struct{}

func (lowerHeaderNames) Visit(node *ast.Node) {
	call, ok := (*node).(*ast.CallNode)
	if !ok || len(call.Arguments) != 1 {
		return
	}
	if id, ok := call.Callee.(*ast.IdentifierNode); !ok || id.Value != "header" {
		return
	}
	if s, ok := call.Arguments[0].(*ast.StringNode); ok {
		s.Value = strings.ToLower(s.Value)
	}
}

// tickName is the name of env.Tick in expressions; it cannot be written
// in one, and neither can the variables meterLoops declares.
const tickName = "ruled:tick"

// tick is env.Tick, the budget check: it counts loop iterations, starts
// the clock at the first and reads it every budgetEvery, and panics with
// ErrExprBudget once the rule's budget is spent (the VM turns the panic
// into an error at the loop's position).
func (e *env) tick() bool {
	e.ticks++
	switch {
	case e.ticks == 1:
		e.started = time.Now()
	case e.ticks%budgetEvery == 0 && time.Since(e.started) > ExprBudget:
		panic(ErrExprBudget)
	}
	return true
}

// meterLoops makes every iteration of a loop (each evaluation of the
// predicate of all, any, none, one, filter, map, count, sum, find...,
// groupBy, sortBy, reduce) call env.Tick before the predicate's body. The
// expression VM has no CPU bound of its own (only a memory budget, which a
// loop that concatenates strings never reaches), and loops are where an
// expression's cost can grow with the request: everything outside them
// runs once per node.
//
// A loop builtin B with predicate bodies P becomes
// `let t = env.Tick; B(..., (t(); P))`: reading a field of the
// environment costs reflection, so it is read once per loop and each
// iteration calls a variable (no reflection, no allocation). A sequence's
// type is its last expression's, so type checking is unchanged. Each loop
// gets its own variable, as nested loops cannot redeclare one.
type meterLoops struct{ n *atomic.Int64 }

func (m meterLoops) Visit(node *ast.Node) {
	b, ok := (*node).(*ast.BuiltinNode)
	if !ok {
		return
	}
	name := ""
	for _, arg := range b.Arguments {
		p, ok := arg.(*ast.PredicateNode)
		if !ok || p.Node == nil {
			continue
		}
		if name == "" {
			name = fmt.Sprintf("%s%d", tickName, m.n.Add(1))
		}
		loc := p.Node.Location()
		call := &ast.CallNode{Callee: &ast.IdentifierNode{Value: name}}
		call.SetLocation(loc)
		call.Callee.SetLocation(loc)
		seq := &ast.SequenceNode{Nodes: []ast.Node{call, p.Node}}
		seq.SetLocation(loc)
		p.Node = seq
	}
	if name == "" {
		return
	}
	tick := &ast.IdentifierNode{Value: tickName}
	tick.SetLocation(b.Location())
	let := &ast.VariableDeclaratorNode{Name: name, Value: tick, Expr: b}
	let.SetLocation(b.Location())
	*node = let
}

// checkLiterals reports constant arguments of cidr() and glob() that can
// never work, and capitalised constant keys of request.headers (which has
// lower-case keys), so that they fail at load rather than never match.
func checkLiterals(root ast.Node) (ast.Node, error) {
	var bad ast.Node
	var err error
	ast.Walk(&root, visitFunc(func(n *ast.Node) {
		if err != nil {
			return
		}
		if f, ok := asField(*n); ok && f.kind == fieldHeader && f.key != strings.ToLower(f.key) {
			if _, isCall := (*n).(*ast.CallNode); !isCall {
				m := (*n).(*ast.MemberNode)
				bad, err = m.Property, fmt.Errorf("header names are lower case: write request.headers[%q] or header(%q)",
					strings.ToLower(f.key), f.key)
				return
			}
		}
		call, ok := (*n).(*ast.CallNode)
		if !ok || len(call.Arguments) != 2 {
			return
		}
		id, ok := call.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		lit, ok := call.Arguments[1].(*ast.StringNode)
		if !ok {
			return
		}
		switch id.Value {
		case "cidr":
			if _, e := parsePrefix(lit.Value); e != nil {
				bad, err = lit, e
			}
		case "glob":
			if e := checkGlob(lit.Value); e != nil {
				bad, err = lit, fmt.Errorf("glob: bad pattern %q", lit.Value)
			}
		}
	}))
	return bad, err
}

type visitFunc func(*ast.Node)

func (f visitFunc) Visit(n *ast.Node) { f(n) }
