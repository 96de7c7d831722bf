package capability_test

import (
	"strings"
	"testing"

	"github.com/ruled-dev/ruled/host/capability"
	"github.com/ruled-dev/ruled/sdk"
)

// CheckInfo refuses what a driver must not keep: a bad plugin name, a
// script name empty or twice, a declared reply with bad names.
func TestCheckInfo(t *testing.T) {
	ok := sdk.Script{Name: "decide", Source: "return 1", Returns: sdk.DecisionShape}
	for _, tc := range []struct {
		info sdk.Info
		want string // in the error; "" for none
	}{
		{sdk.Info{Name: "fw", Scripts: []sdk.Script{ok, {Name: "peek"}}}, ""},
		{sdk.Info{Name: "FW"}, `plugin name "FW"`},
		{sdk.Info{Name: "fw", Scripts: []sdk.Script{ok, ok}}, `script name "decide" empty or declared twice`},
		{sdk.Info{Name: "fw", Scripts: []sdk.Script{{Name: ""}}}, `script name "" empty or declared twice`},
		{sdk.Info{Name: "fw", Scripts: []sdk.Script{{Name: "d", Returns: sdk.NewShape("allowed", "allowed")}}},
			`plugin fw: script "d": reply element 2: name "allowed" is declared twice`},
	} {
		err := capability.CheckInfo(&tc.info)
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.info, err, tc.want)
		}
	}
}

// CloneInfo's scripts and commands are the caller's.
func TestCloneInfo(t *testing.T) {
	info := sdk.Info{Name: "fw", Version: "1", Scripts: []sdk.Script{{Name: "decide", Commands: []string{"GET", "SET"}}},
		Traits: sdk.Traits{Leasable: true}}
	c := capability.CloneInfo(info)
	c.Scripts[0].Name = "other"
	c.Scripts[0].Commands[0] = "DEL"
	if info.Scripts[0].Name != "decide" || info.Scripts[0].Commands[0] != "GET" {
		t.Fatalf("the clone shares the original's scripts: %+v", info.Scripts)
	}
	if c.Name != info.Name || c.Version != info.Version || c.Traits != info.Traits || len(c.Scripts[0].Commands) != 2 {
		t.Fatalf("clone %+v of %+v", c, info)
	}
}
