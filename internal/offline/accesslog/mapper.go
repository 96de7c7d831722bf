package accesslog

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/vm"

	"github.com/ruled-dev/ruled/rules"
)

// env is what --map expressions see: the Entry's fields.
type env struct {
	IP        string            `expr:"ip"`
	Method    string            `expr:"method"`
	URI       string            `expr:"uri"`
	Path      string            `expr:"path"`
	Query     map[string]string `expr:"query"`
	Host      string            `expr:"host"`
	User      string            `expr:"user"`
	Proto     string            `expr:"proto"`
	Request   string            `expr:"request"`
	Status    int               `expr:"status"`
	Bytes     int               `expr:"bytes"`
	Referer   string            `expr:"referer"`
	UserAgent string            `expr:"user_agent"`
	Time      time.Time         `expr:"time"`
	Fields    map[string]any    `expr:"fields"`

	// Field is fields.NAME, as fieldAccess rewrites it: one key of the
	// line's JSON object, without decoding the others.
	Field func(string) any `expr:"ruled:field"`
}

// fieldFunc is the name of env.Field in expressions; it cannot be
// written in one.
const fieldFunc = "ruled:field"

// fieldAccess rewrites fields.NAME and fields["NAME"] (a constant name)
// as a call of env.Field, which scans the line for that key: decoding
// the whole object for `fields` costs several microseconds a line.
// Other uses of fields (fields[x], keys(fields), "k" in fields) keep the
// decoded map.
type fieldAccess struct{}

func (fieldAccess) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok {
		return
	}
	id, ok := m.Node.(*ast.IdentifierNode)
	if !ok || id.Value != "fields" {
		return
	}
	name, ok := m.Property.(*ast.StringNode)
	if !ok {
		return
	}
	arg := &ast.StringNode{Value: name.Value}
	arg.SetLocation(name.Location())
	callee := &ast.IdentifierNode{Value: fieldFunc}
	callee.SetLocation(m.Location())
	call := &ast.CallNode{Callee: callee, Arguments: []ast.Node{arg}}
	call.SetLocation(m.Location())
	*node = call
}

// targetKind is what a mapping sets.
type targetKind uint8

const (
	tIP targetKind = iota
	tMethod
	tPath
	tHost
	tUser
	tHeader
	tQuery
	tAttr
)

// The default mappings, as bits: a --map spec for the same target turns
// one off.
const (
	dIP = 1 << iota
	dMethod
	dPath
	dHost
	dUser
	dQuery
	dUserAgent
	dReferer
	dAll = dIP | dMethod | dPath | dHost | dUser | dQuery | dUserAgent | dReferer
)

// mapping is one compiled --map spec.
type mapping struct {
	spec string
	kind targetKind
	name string // of a header (lower case), query parameter or attribute
	prog *vm.Program
}

// Mapper maps Entries to check bodies (rules.Input): the default mapping,
// changed by --map specs. It is safe for concurrent use.
type Mapper struct {
	defaults   uint
	maps       []mapping
	needQuery  bool // an expression reads query
	needFields bool // an expression reads fields
	states     sync.Pool
}

// state is the per-call state of expressions.
type state struct {
	vm     vm.VM
	env    env
	entry  *Entry            // being mapped
	field  func(string) any  // st.lookup, bound once
	query  map[string]string // empty, for a line without a query
	fields map[string]any    // empty, for a line without fields
}

// NewMapper compiles --map specs, "TARGET=EXPR", into a Mapper. TARGET is
// ip, method, path, host, user, headers.NAME, query.NAME or attrs.NAME;
// EXPR an expr-lang expression over the Entry (see the package doc). No
// specs give the default mapping. Every bad spec is reported, each error
// naming its spec.
func NewMapper(specs []string) (*Mapper, error) {
	m := &Mapper{defaults: dAll}
	seen := map[string]string{}
	var errs []error
	for _, spec := range specs {
		mp, err := compileSpec(spec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := fmt.Sprint(mp.kind, ".", mp.name)
		if prev, dup := seen[key]; dup {
			errs = append(errs, fmt.Errorf("map %q: target already set by %q", spec, prev))
			continue
		}
		seen[key] = spec
		switch {
		case mp.kind == tIP:
			m.defaults &^= dIP
		case mp.kind == tMethod:
			m.defaults &^= dMethod
		case mp.kind == tPath:
			m.defaults &^= dPath
		case mp.kind == tHost:
			m.defaults &^= dHost
		case mp.kind == tUser:
			m.defaults &^= dUser
		case mp.kind == tHeader && mp.name == "user-agent":
			m.defaults &^= dUserAgent
		case mp.kind == tHeader && mp.name == "referer":
			m.defaults &^= dReferer
		}
		m.needQuery = m.needQuery || uses(mp.prog, "query")
		m.needFields = m.needFields || uses(mp.prog, "fields")
		m.maps = append(m.maps, mp)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	m.states.New = func() any {
		st := &state{query: map[string]string{}, fields: map[string]any{}}
		st.field = st.lookup
		return st
	}
	return m, nil
}

// compileSpec compiles one "TARGET=EXPR".
func compileSpec(spec string) (mapping, error) {
	target, src, ok := strings.Cut(spec, "=")
	target = strings.TrimSpace(target)
	if !ok || target == "" || strings.TrimSpace(src) == "" {
		return mapping{}, fmt.Errorf("map %q: want TARGET=EXPR", spec)
	}
	mp := mapping{spec: spec}
	switch target {
	case "ip":
		mp.kind = tIP
	case "method":
		mp.kind = tMethod
	case "path":
		mp.kind = tPath
	case "host":
		mp.kind = tHost
	case "user":
		mp.kind = tUser
	default:
		prefix, name, _ := strings.Cut(target, ".")
		switch prefix {
		case "headers":
			mp.kind, mp.name = tHeader, strings.ToLower(name)
		case "query":
			mp.kind, mp.name = tQuery, name
		case "attrs":
			mp.kind, mp.name = tAttr, name
		default:
			return mapping{}, fmt.Errorf("map %q: unknown target %q (want ip, method, path, host, user, headers.NAME, query.NAME or attrs.NAME)", spec, target)
		}
		if name == "" {
			return mapping{}, fmt.Errorf("map %q: target %q needs a name after the dot", spec, target)
		}
	}
	prog, err := expr.Compile(src, expr.Env(env{}), expr.Patch(fieldAccess{}))
	if err != nil {
		var fe *file.Error
		if errors.As(err, &fe) {
			return mapping{}, fmt.Errorf("map %q: %s (at character %d of the expression)", spec, fe.Message, fe.From+1)
		}
		return mapping{}, fmt.Errorf("map %q: %w", spec, err)
	}
	if t := prog.Node().Type(); t != nil && !stringable(t) {
		return mapping{}, fmt.Errorf("map %q: the expression gives %s, want a string, number or boolean", spec, t)
	}
	mp.prog = prog
	return mp, nil
}

// stringable reports whether a value of type t converts to a string.
func stringable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Map, reflect.Slice, reflect.Array, reflect.Func, reflect.Chan, reflect.Pointer:
		return false
	case reflect.Struct:
		return t == reflect.TypeFor[time.Time]()
	}
	return true
}

// uses reports whether prog reads the variable name.
func uses(prog *vm.Program, name string) bool {
	return ast.Find(prog.Node(), func(n ast.Node) bool {
		id, ok := n.(*ast.IdentifierNode)
		return ok && id.Value == name
	}) != nil
}

// Map fills in from e. It resets in first, reusing in's maps (cleared)
// when they are not nil: pass the same Input to save allocations only
// when the previous result is no longer used. A map target whose value
// is "" is left unset. An expression that fails for e is a *LineError.
func (m *Mapper) Map(e *Entry, in *rules.Input) error {
	hdr, query, attrs := in.Request.Headers, in.Request.Query, in.Attrs
	clear(hdr)
	clear(query)
	clear(attrs)
	*in = rules.Input{Request: rules.Request{Headers: hdr, Query: query}, Attrs: attrs}
	req := &in.Request
	d := m.defaults
	if d&dIP != 0 {
		req.IP = e.IP
	}
	if d&dMethod != 0 {
		req.Method = e.Method
	}
	if d&dPath != 0 {
		req.Path = e.Path
	}
	if d&dHost != 0 {
		req.Host = e.Host
	}
	if d&dUser != 0 {
		req.User = e.User
	}
	if d&dQuery != 0 && e.Query != "" {
		if e.queryDone {
			for k, v := range e.query {
				put(&req.Query, k, v)
			}
		} else {
			if req.Query == nil {
				req.Query = make(map[string]string, strings.Count(e.Query, "&")+1)
			}
			addQuery(req.Query, e.Query)
		}
	}
	if d&dUserAgent != 0 && e.UserAgent != "" {
		put(&req.Headers, "user-agent", e.UserAgent)
	}
	if d&dReferer != 0 && e.Referer != "" {
		put(&req.Headers, "referer", e.Referer)
	}
	if len(m.maps) == 0 {
		return nil
	}
	return m.eval(e, in)
}

// eval runs the --map expressions for e.
func (m *Mapper) eval(e *Entry, in *rules.Input) error {
	st := m.states.Get().(*state)
	defer func() {
		st.env, st.entry = env{}, nil // hold no line
		m.states.Put(st)
	}()
	st.entry = e
	st.env = env{
		Field: st.field,
		IP:    e.IP, Method: e.Method, URI: e.URI, Path: e.Path, Host: e.Host, User: e.User,
		Proto: e.Proto, Request: e.Request, Status: e.Status, Bytes: int(e.Bytes),
		Referer: e.Referer, UserAgent: e.UserAgent, Time: e.Time,
		Query: st.query, Fields: st.fields,
	}
	if m.needQuery {
		if q := e.QueryMap(); q != nil {
			st.env.Query = q
		}
	}
	if m.needFields {
		f, err := e.Fields()
		if err != nil {
			return &LineError{Line: e.Line, Reason: "fields", Err: err}
		}
		if f != nil {
			st.env.Fields = f
		}
	}
	req := &in.Request
	for i := range m.maps {
		mp := &m.maps[i]
		out, err := st.vm.Run(mp.prog, &st.env)
		if err != nil {
			return &LineError{Line: e.Line, Reason: fmt.Sprintf("map %q", mp.spec), Err: runError(err)}
		}
		v, err := toString(out)
		if err != nil {
			return &LineError{Line: e.Line, Reason: fmt.Sprintf("map %q", mp.spec), Err: err}
		}
		switch mp.kind {
		case tIP:
			req.IP = v
		case tMethod:
			req.Method = v
		case tPath:
			req.Path = v
		case tHost:
			req.Host = v
		case tUser:
			req.User = v
		case tHeader:
			set(&req.Headers, mp.name, v)
		case tQuery:
			set(&req.Query, mp.name, v)
		case tAttr:
			set(&in.Attrs, mp.name, v)
		}
	}
	return nil
}

// put sets m[k], making m when it is nil.
func put(m *map[string]string, k, v string) {
	if *m == nil {
		*m = make(map[string]string, 2)
	}
	(*m)[k] = v
}

// set sets m[k], or deletes it when v is "".
func set(m *map[string]string, k, v string) {
	if v == "" {
		delete(*m, k)
		return
	}
	put(m, k, v)
}

// toString converts an expression's result: numbers plainly (no
// exponent), booleans as true/false, a time in RFC 3339, nil as "".
func toString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int8, int16, int32, int64:
		return strconv.FormatInt(reflect.ValueOf(v).Int(), 10), nil
	case uint, uint8, uint16, uint32, uint64, uintptr:
		return strconv.FormatUint(reflect.ValueOf(v).Uint(), 10), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 32), nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case time.Duration:
		return v.String(), nil
	}
	return "", fmt.Errorf("the expression gave %T, want a string, number or boolean", v)
}

// lookup is env.Field: the value of the key name of the entry's JSON
// object (the last, when the key repeats, as encoding/json keeps it), as
// encoding/json would decode it; nil when it is missing, null, the
// string "" or "-" (how nginx logs a missing value), or the line is not
// JSON. A value that does not decode panics with the error, which the VM
// returns.
func (st *state) lookup(name string) any {
	e := st.entry
	if !e.json {
		return nil
	}
	if e.fieldsOK { // decoded already
		v := e.fields[name]
		if s, ok := v.(string); ok && (s == "" || s == "-") {
			return nil
		}
		return v
	}
	raw, kind := findKey(e.raw, name)
	switch kind {
	case 0:
		return nil
	case 's':
		if s := jsonUnescape(raw); s != "" && s != "-" {
			return s
		}
		return nil
	}
	switch raw {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if f, err := strconv.ParseFloat(raw, 64); err == nil {
		return f // as encoding/json decodes a number into any
	}
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		panic(fmt.Errorf("fields.%s: %w", name, err))
	}
	return v
}

// runError returns an expression's run-time error on one line, without
// the source snippet under it that expr adds: the cause, when there is
// one, else the message and where in the expression it failed.
func runError(err error) error {
	var fe *file.Error
	if !errors.As(err, &fe) {
		return err
	}
	if fe.Prev != nil {
		return fe.Prev
	}
	return fmt.Errorf("%s (at character %d of the expression)", fe.Message, fe.From+1)
}
