package sdk

import (
	"errors"
	"fmt"
)

// Field stands, among the Args of a template (Templater), for a field of
// the request being decided: Expand puts the request's value in its place.
type Field uint8

// The request fields a template may name.
const (
	// FieldHits is Request.Hits, as an int64.
	FieldHits Field = iota + 1
	// FieldDedupID is Request.DedupID, as a string.
	FieldDedupID
	// FieldBestEffort is 1 when Request.BestEffort is set, else 0, as an
	// int64.
	FieldBestEffort
	// FieldSubject is Request.Subject, as a string.
	FieldSubject
)

// fieldNames are the Fields' names, by value.
var fieldNames = [...]string{FieldHits: "hits", FieldDedupID: "dedup_id", FieldBestEffort: "best_effort", FieldSubject: "subject"}

// Valid reports whether f is one of the Fields above.
func (f Field) Valid() bool { return f >= FieldHits && f <= FieldSubject }

// String returns f's name, as docs/abi.md spells it.
func (f Field) String() string {
	if !f.Valid() {
		return fmt.Sprintf("Field(%d)", uint8(f))
	}
	return fieldNames[f]
}

// Of returns f's value in r; nil when f is not Valid.
func (f Field) Of(r Request) any {
	switch f {
	case FieldHits:
		return r.Hits
	case FieldDedupID:
		return r.DedupID
	case FieldBestEffort:
		if r.BestEffort {
			return int64(1)
		}
		return int64(0)
	case FieldSubject:
		return r.Subject
	}
	return nil
}

// Templater is a Stepper whose first step, under some configs, is the same
// for every request but for fields of the request among its arguments: a
// template. The host expands the template itself instead of calling Start,
// so that no code of a plugin that is not linked into ruled (a Wasm
// module) runs on the way to such a decision, and it costs what a
// built-in's does.
//
// Start must answer what Expand makes of the template, and is best written
// as that (Expand(tmpl, r)), so that the two cannot differ; plugintest's
// conformance run checks that they agree.
type Templater interface {
	Stepper
	// Template returns c's template and true, or false when Start must
	// run for every request under c. The host asks once per config, when
	// the config is configured; the template must pass CheckTemplate.
	Template(c Config) (Step, bool)
}

// Expand returns template t for request r: a step with each Field among
// t's Args replaced by its value in r. t itself is not changed.
func Expand(t Step, r Request) Step {
	args := make([]any, len(t.Args))
	for i, a := range t.Args {
		if f, ok := a.(Field); ok {
			args[i] = f.Of(r)
		} else {
			args[i] = a
		}
	}
	t.Args = args
	return t
}

// CheckTemplate reports a template the host must refuse: one that calls no
// script, names a Field that is not Valid, or that Step.Check refuses once
// expanded.
func CheckTemplate(t Step) error {
	if t.Final() {
		return errors.New("template calls no script")
	}
	for i, a := range t.Args {
		if f, ok := a.(Field); ok && !f.Valid() {
			return fmt.Errorf("template argument %d: unknown request field %d", i, uint8(f))
		}
	}
	return Expand(t, Request{}).Check()
}
