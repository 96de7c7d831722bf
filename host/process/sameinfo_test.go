package process

import (
	"testing"

	"github.com/ruled-dev/ruled/sdk"
)

// TestSameInfoComparesScriptsAsSets: a plugin that lists its scripts (or a
// script's commands) from a map answers Init in another order after a
// restart; it is still the same plugin and must be restarted. One that
// declares other traits is not: the rules were compiled with the first.
func TestSameInfoComparesScriptsAsSets(t *testing.T) {
	first := sdk.Info{Name: "p", Version: "1", Traits: sdk.Traits{FirmDenials: true, Refunds: true}, Scripts: []sdk.Script{
		{Name: "take", Source: "return 1", Commands: []string{"GET", "SET", "PEXPIRE"}},
		{Name: "peek", Source: "return 2", Commands: []string{"GET"}},
	}}
	with := func(f func(*sdk.Info)) *sdk.Info {
		info := sdk.Info{Name: first.Name, Version: first.Version, Traits: first.Traits}
		for _, s := range first.Scripts {
			s.Commands = append([]string(nil), s.Commands...)
			info.Scripts = append(info.Scripts, s)
		}
		f(&info)
		return &info
	}
	for _, c := range []struct {
		name string
		info *sdk.Info
		same bool
	}{
		{"identical", with(func(*sdk.Info) {}), true},
		{"scripts in another order", with(func(i *sdk.Info) { i.Scripts[0], i.Scripts[1] = i.Scripts[1], i.Scripts[0] }), true},
		{"commands in another order", with(func(i *sdk.Info) { i.Scripts[0].Commands = []string{"PEXPIRE", "GET", "SET"} }), true},
		{"a command repeated", with(func(i *sdk.Info) { i.Scripts[1].Commands = []string{"GET", "GET"} }), true},
		{"other name", with(func(i *sdk.Info) { i.Name = "q" }), false},
		{"other version", with(func(i *sdk.Info) { i.Version = "2" }), false},
		{"a script less", with(func(i *sdk.Info) { i.Scripts = i.Scripts[1:] }), false},
		{"a script more", with(func(i *sdk.Info) { i.Scripts = append(i.Scripts, sdk.Script{Name: "x", Source: "return 3"}) }), false},
		{"a script renamed", with(func(i *sdk.Info) { i.Scripts[1].Name = "look" }), false},
		{"a script twice instead of another", with(func(i *sdk.Info) { i.Scripts[1] = i.Scripts[0] }), false},
		{"other source", with(func(i *sdk.Info) { i.Scripts[1].Source = "return 4" }), false},
		{"a command more", with(func(i *sdk.Info) { i.Scripts[1].Commands = []string{"GET", "DEL"} }), false},
		{"a command less", with(func(i *sdk.Info) { i.Scripts[0].Commands = []string{"GET", "SET"} }), false},
		{"a trait more", with(func(i *sdk.Info) { i.Traits.Leasable = true }), false},
		{"a trait less", with(func(i *sdk.Info) { i.Traits.FirmDenials = false }), false},
	} {
		if got := sameInfo(c.info, &first); got != c.same {
			t.Errorf("%s: sameInfo = %v, want %v", c.name, got, c.same)
		}
		if got := sameInfo(&first, c.info); got != c.same {
			t.Errorf("%s, the other way round: sameInfo = %v, want %v", c.name, got, c.same)
		}
	}
}
