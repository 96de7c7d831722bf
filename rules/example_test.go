package rules_test

import (
	"fmt"

	"github.com/ruled-dev/ruled/plugins/fixedwindow"
	"github.com/ruled-dev/ruled/rules"
	"github.com/ruled-dev/ruled/sdk"
)

// builtins is the smallest Catalog: a map of plugin names.
type builtins map[string]sdk.Algorithm

func (b builtins) Lookup(name string) (sdk.Algorithm, bool) {
	a, ok := b[name]
	return a, ok
}

func ExampleLoad() {
	set, err := rules.Load("../examples/rules/basic.yaml", builtins{"fixedwindow": fixedwindow.New()})
	if err != nil {
		fmt.Println(err) // every problem, one per line, as file:line:col: rule "name": message
		return
	}
	in := &rules.Input{Request: rules.Request{IP: "203.0.113.7", Method: "GET", Path: "/"}}
	for _, sel := range set.Match(in) {
		if sel.Err != nil {
			fmt.Println("error decision:", sel.Err)
			continue
		}
		fmt.Printf("%s: plugin %s, subject %s, config %+v\n", sel.Rule.Name, sel.Rule.Plugin, sel.Subject, sel.Config)
	}
	// Output:
	// per-ip: plugin fixedwindow, subject 203.0.113.7, config {Limit:5 Window:10s Offset:0s}
}

func ExampleErrorList() {
	_, err := rules.Load("testdata/broken.yaml", builtins{"fixedwindow": fixedwindow.New()})
	if list, ok := err.(rules.ErrorList); ok {
		for _, e := range list {
			fmt.Printf("%s [%s]\n", e, e.Code)
		}
	}
	// Output:
	// testdata/broken.yaml:4:27: rule "per-ip": subject: unknown name reqest [expr]
	// testdata/broken.yaml:6:32: rule "per-ip": config: window: want a duration such as "500ms", "10s" or "1m", got 10 sex [bad-config]
	// testdata/broken.yaml:7:5: rule "per-ip": unknown field "shadw" (did you mean "shadow"?) [unknown-field]
}
