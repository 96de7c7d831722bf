package rules

import (
	"net/netip"
	"strings"

	"github.com/expr-lang/expr/ast"
)

// Most rule conditions are conjunctions of plain comparisons of request
// fields with constants (`request.path == "/login" && request.method ==
// "POST"`), and most subjects are a plain field (`request.ip`). At load
// such parts are extracted into Go closures over the request, so that
// Match can reject a non-matching rule, or take a subject, without running
// the expression VM. The full program still runs whenever the extracted
// part does not decide alone, so behaviour is exactly that of expr.

// fieldKind says which part of the input a field reads.
type fieldKind uint8

const (
	fieldIP fieldKind = iota
	fieldMethod
	fieldPath
	fieldHost
	fieldUser
	fieldHeader
	fieldQuery
	fieldAttr
)

// field is a string-valued part of the input.
type field struct {
	kind fieldKind
	key  string // for headers (lower case), query and attrs
}

func (f field) get(r *Request, attrs map[string]string) string {
	switch f.kind {
	case fieldIP:
		return r.IP
	case fieldMethod:
		return r.Method
	case fieldPath:
		return r.Path
	case fieldHost:
		return r.Host
	case fieldUser:
		return r.User
	case fieldHeader:
		return r.Headers[f.key]
	case fieldQuery:
		return r.Query[f.key]
	}
	return attrs[f.key]
}

// asField recognises request.ip (and the other scalar request fields),
// request.headers["k"], request.query["k"], attrs["k"] and header("k").
func asField(n ast.Node) (field, bool) {
	switch t := n.(type) {
	case *ast.MemberNode:
		prop, ok := t.Property.(*ast.StringNode)
		if !ok {
			return field{}, false
		}
		switch inner := t.Node.(type) {
		case *ast.IdentifierNode:
			switch inner.Value {
			case "attrs":
				return field{kind: fieldAttr, key: prop.Value}, true
			case "request":
				switch prop.Value {
				case "ip":
					return field{kind: fieldIP}, true
				case "method":
					return field{kind: fieldMethod}, true
				case "path":
					return field{kind: fieldPath}, true
				case "host":
					return field{kind: fieldHost}, true
				case "user":
					return field{kind: fieldUser}, true
				}
			}
		case *ast.MemberNode:
			id, ok := inner.Node.(*ast.IdentifierNode)
			sub, ok2 := inner.Property.(*ast.StringNode)
			if !ok || !ok2 || id.Value != "request" {
				return field{}, false
			}
			switch sub.Value {
			case "headers":
				// Keys are lower case; a literal with capitals can never match.
				return field{kind: fieldHeader, key: prop.Value}, true
			case "query":
				return field{kind: fieldQuery, key: prop.Value}, true
			}
		}
	case *ast.CallNode:
		id, ok := t.Callee.(*ast.IdentifierNode)
		if !ok || id.Value != "header" || len(t.Arguments) != 1 {
			return field{}, false
		}
		if s, ok := t.Arguments[0].(*ast.StringNode); ok {
			return field{kind: fieldHeader, key: strings.ToLower(s.Value)}, true
		}
	}
	return field{}, false
}

// guardOp is the comparison a guard makes.
type guardOp uint8

const (
	opEq guardOp = iota
	opNe
	opPrefix
	opSuffix
	opContains
	opIn
	opCIDR // cidr(field, "literal")
	opGlob // glob(field, "literal")
)

// guard is a necessary condition of a rule's when: a comparison of a field
// with a constant.
type guard struct {
	f      field
	op     guardOp
	s      string              // the constant, or the glob pattern
	set    map[string]struct{} // for opIn
	prefix netip.Prefix        // for opCIDR
}

func (g *guard) test(r *Request, attrs map[string]string) bool {
	v := g.f.get(r, attrs)
	switch g.op {
	case opEq:
		return v == g.s
	case opNe:
		return v != g.s
	case opPrefix:
		return strings.HasPrefix(v, g.s)
	case opSuffix:
		return strings.HasSuffix(v, g.s)
	case opContains:
		return strings.Contains(v, g.s)
	case opCIDR:
		return cidrContains(g.prefix, v)
	case opGlob:
		ok, _ := glob(g.s, v) // the pattern was checked at load
		return ok
	}
	_, ok := g.set[v]
	return ok
}

// extractGuards returns the guards found among the leading conjuncts of a
// when expression, in evaluation order, and whether they are the whole
// expression. Only a prefix of the conjuncts is used: `a && b` never
// evaluates b when a is false, so rejecting on a guard taken from a
// leading conjunct never hides a run-time error expr would have reported.
func extractGuards(root ast.Node) ([]guard, bool) {
	if b, ok := root.(*ast.BoolNode); ok && b.Value {
		return nil, true
	}
	conj := conjuncts(root, nil)
	var gs []guard
	for _, c := range conj {
		g, ok := asGuard(c)
		if !ok {
			return gs, false
		}
		gs = append(gs, g)
	}
	return gs, true
}

func conjuncts(n ast.Node, out []ast.Node) []ast.Node {
	if b, ok := n.(*ast.BinaryNode); ok && (b.Operator == "&&" || b.Operator == "and") {
		out = conjuncts(b.Left, out)
		return conjuncts(b.Right, out)
	}
	return append(out, n)
}

func asGuard(n ast.Node) (guard, bool) {
	if call, ok := n.(*ast.CallNode); ok {
		return asFuncGuard(call)
	}
	b, ok := n.(*ast.BinaryNode)
	if !ok {
		return guard{}, false
	}
	ops := map[string]guardOp{"==": opEq, "!=": opNe, "startsWith": opPrefix, "endsWith": opSuffix, "contains": opContains}
	if op, ok := ops[b.Operator]; ok {
		f, isField := asField(b.Left)
		lit, isLit := b.Right.(*ast.StringNode)
		if !isField || !isLit {
			if op != opEq && op != opNe {
				return guard{}, false
			}
			f, isField = asField(b.Right) // "const" == field
			lit, isLit = b.Left.(*ast.StringNode)
			if !isField || !isLit {
				return guard{}, false
			}
		}
		return guard{f: f, op: op, s: lit.Value}, true
	}
	if b.Operator != "in" {
		return guard{}, false
	}
	f, ok := asField(b.Left)
	if !ok {
		return guard{}, false
	}
	set := map[string]struct{}{}
	switch r := b.Right.(type) {
	case *ast.ConstantNode: // the optimizer turns constant string arrays into sets
		m, ok := r.Value.(map[string]struct{})
		if !ok {
			return guard{}, false
		}
		for k := range m {
			set[k] = struct{}{}
		}
	case *ast.ArrayNode:
		for _, e := range r.Nodes {
			s, ok := e.(*ast.StringNode)
			if !ok {
				return guard{}, false
			}
			set[s.Value] = struct{}{}
		}
	default:
		return guard{}, false
	}
	return guard{f: f, op: opIn, set: set}, true
}

// asFuncGuard recognises cidr(field, "literal") and glob(field, "literal").
func asFuncGuard(call *ast.CallNode) (guard, bool) {
	id, ok := call.Callee.(*ast.IdentifierNode)
	if !ok || len(call.Arguments) != 2 {
		return guard{}, false
	}
	f, ok := asField(call.Arguments[0])
	lit, ok2 := call.Arguments[1].(*ast.StringNode)
	if !ok || !ok2 {
		return guard{}, false
	}
	switch id.Value {
	case "cidr":
		p, err := parsePrefix(lit.Value)
		if err != nil {
			return guard{}, false
		}
		return guard{f: f, op: opCIDR, prefix: p}, true
	case "glob":
		if checkGlob(lit.Value) != nil {
			return guard{}, false
		}
		return guard{f: f, op: opGlob, s: lit.Value}, true
	}
	return guard{}, false
}

// fastKind says how a fastValue is computed.
type fastKind uint8

const (
	fastConst  fastKind = iota // a constant
	fastField                  // a field of the input
	fastConcat                 // string concatenation of parts
	fastCond                   // guards ? then : els
)

// fastValue is a subject or dynamic config value computed in Go without
// the VM: a constant, a field, a concatenation of fields and string
// constants, or a conditional on guards between such values.
type fastValue struct {
	kind   fastKind
	c      any // constant, boxed once at load
	f      field
	parts  []fastValue
	guards []guard
	then   *fastValue
	els    *fastValue
}

func (v *fastValue) eval(r *Request, attrs map[string]string) any {
	switch v.kind {
	case fastConst:
		return v.c
	case fastField:
		return v.f.get(r, attrs)
	case fastConcat:
		return v.str(r, attrs)
	}
	for i := range v.guards {
		if !v.guards[i].test(r, attrs) {
			return v.els.eval(r, attrs)
		}
	}
	return v.then.eval(r, attrs)
}

// str evaluates a string-valued fastValue without boxing it.
func (v *fastValue) str(r *Request, attrs map[string]string) string {
	switch v.kind {
	case fastConst:
		s, _ := v.c.(string)
		return s
	case fastField:
		return v.f.get(r, attrs)
	case fastConcat:
		n := 0
		for i := range v.parts {
			if v.parts[i].kind == fastConst {
				n += len(v.parts[i].c.(string))
			} else {
				n += len(v.parts[i].f.get(r, attrs))
			}
		}
		var b strings.Builder
		b.Grow(n)
		for i := range v.parts {
			b.WriteString(v.parts[i].str(r, attrs))
		}
		return b.String()
	}
	for i := range v.guards {
		if !v.guards[i].test(r, attrs) {
			return v.els.str(r, attrs)
		}
	}
	return v.then.str(r, attrs)
}

// asFastValue compiles the subset of expressions fastValue covers. With
// strOnly, only string-valued expressions are accepted.
func asFastValue(n ast.Node, strOnly bool) (*fastValue, bool) {
	if f, ok := asField(n); ok {
		return &fastValue{kind: fastField, f: f}, true
	}
	switch t := n.(type) {
	case *ast.StringNode:
		return &fastValue{kind: fastConst, c: t.Value}, true
	case *ast.IntegerNode:
		return &fastValue{kind: fastConst, c: t.Value}, !strOnly
	case *ast.FloatNode:
		return &fastValue{kind: fastConst, c: t.Value}, !strOnly
	case *ast.BoolNode:
		return &fastValue{kind: fastConst, c: t.Value}, !strOnly
	case *ast.BinaryNode:
		if t.Operator != "+" {
			return nil, false
		}
		var parts []fastValue
		for _, side := range []ast.Node{t.Left, t.Right} {
			v, ok := asFastValue(side, true)
			if !ok || (v.kind != fastConst && v.kind != fastField && v.kind != fastConcat) {
				return nil, false
			}
			if v.kind == fastConcat {
				parts = append(parts, v.parts...)
			} else {
				parts = append(parts, *v)
			}
		}
		return &fastValue{kind: fastConcat, parts: parts}, true
	case *ast.ConditionalNode:
		guards, full := extractGuards(t.Cond)
		if !full {
			return nil, false
		}
		then, ok1 := asFastValue(t.Exp1, strOnly)
		els, ok2 := asFastValue(t.Exp2, strOnly)
		if !ok1 || !ok2 {
			return nil, false
		}
		return &fastValue{kind: fastCond, guards: guards, then: then, els: els}, true
	}
	return nil, false
}
