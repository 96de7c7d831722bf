package capability

import (
	"fmt"

	"github.com/ruled-dev/ruled/sdk"
)

// What a plugin that runs outside ruled's binary (a Wasm module, a process)
// says about itself, as its driver takes it in and hands it out.

// CheckInfo validates what a plugin says about itself, before its driver
// keeps it: a valid name, script names neither empty nor declared twice,
// and valid field names in each script's declared reply. Register checks
// the scripts again; CheckInfo lets a driver refuse a plugin when it loads.
func CheckInfo(info *sdk.Info) error {
	if !ValidName(info.Name) {
		return fmt.Errorf("plugin name %q: want lower-case letters, digits, '-' or '_' (at most 63)", info.Name)
	}
	seen := map[string]bool{}
	for _, s := range info.Scripts {
		if s.Name == "" || seen[s.Name] {
			return fmt.Errorf("plugin %s: script name %q empty or declared twice", info.Name, s.Name)
		}
		seen[s.Name] = true
		if s.Returns != nil {
			if err := s.Returns.CheckNames(); err != nil {
				return fmt.Errorf("plugin %s: script %q: %w", info.Name, s.Name, err)
			}
		}
	}
	return nil
}

// CloneInfo returns info with scripts and commands of its own, so that a
// driver's Info can hand out what the plugin said without sharing it.
// Declared replies (sdk.Shape) are immutable and shared.
func CloneInfo(info sdk.Info) sdk.Info {
	scripts := make([]sdk.Script, len(info.Scripts))
	for i, s := range info.Scripts {
		s.Commands = append([]string(nil), s.Commands...)
		scripts[i] = s
	}
	info.Scripts = scripts
	return info
}
