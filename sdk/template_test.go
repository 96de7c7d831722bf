package sdk_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ruled-dev/ruled/sdk"
)

func TestExpandPutsTheRequestInPlaceOfItsFields(t *testing.T) {
	tmpl := sdk.Run("decide", []string{"c"}, int64(10), sdk.FieldHits, sdk.FieldDedupID, sdk.FieldBestEffort,
		sdk.FieldSubject, "literal").ThenDecide(time.Second)
	orig := append([]any(nil), tmpl.Args...)
	for _, r := range []sdk.Request{
		{Subject: "s", Hits: 3, DedupID: "d", BestEffort: true},
		{Subject: "\xff", Hits: -2},
	} {
		best := int64(0)
		if r.BestEffort {
			best = 1
		}
		got := sdk.Expand(tmpl, r)
		want := sdk.Run("decide", []string{"c"}, int64(10), r.Hits, r.DedupID, best, r.Subject, "literal").ThenDecide(time.Second)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%+v: got %#v, want %#v", r, got, want)
		}
		if err := got.Check(); err != nil {
			t.Errorf("expanded step refused: %v", err)
		}
	}
	if !reflect.DeepEqual(tmpl.Args, orig) {
		t.Errorf("Expand changed the template: %v", tmpl.Args)
	}
}

func TestFieldsAreRefusedOutsideTemplates(t *testing.T) {
	s := sdk.Run("decide", []string{"c"}, int64(1), sdk.FieldHits)
	if err := s.Check(); err == nil || !strings.Contains(err.Error(), "request field hits") {
		t.Fatalf("Check of an unexpanded step: %v", err)
	}
	if err := sdk.CheckTemplate(s); err != nil {
		t.Fatalf("CheckTemplate: %v", err)
	}
	for name, bad := range map[string]sdk.Step{
		"final":         sdk.Done(sdk.Decision{Allowed: true}),
		"unknown field": sdk.Run("decide", nil, sdk.Field(0)),
		"state":         {Script: "decide", State: make([]byte, sdk.MaxStepState+1)},
	} {
		if err := sdk.CheckTemplate(bad); err == nil {
			t.Errorf("%s: CheckTemplate accepted %#v", name, bad)
		}
	}
}

func TestFieldNames(t *testing.T) {
	var names []string
	for f := sdk.Field(0); f <= sdk.FieldSubject+1; f++ {
		names = append(names, f.String())
		if f.Valid() != (f >= sdk.FieldHits && f <= sdk.FieldSubject) || (f.Of(sdk.Request{Hits: 1}) == nil) == f.Valid() {
			t.Errorf("field %d: Valid %v, Of %v", f, f.Valid(), f.Of(sdk.Request{Hits: 1}))
		}
	}
	if got := strings.Join(names, " "); got != "Field(0) hits dedup_id best_effort subject Field(5)" {
		t.Errorf("names: %s", got)
	}
}
