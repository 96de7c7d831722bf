package envoyconfig

import (
	"path/filepath"
	"testing"

	"github.com/ruled-dev/ruled/plugins/builtin"
	"github.com/ruled-dev/ruled/rules"
)

func builtinCatalog() builtin.Catalog { return builtin.NewCatalog() }

// TestGeneratedRulesLoad loads every golden rule directory with ruled's
// rule loader, as `ruled check` and `ruled serve --rules` do.
func TestGeneratedRulesLoad(t *testing.T) {
	root := filepath.Join("testdata", "translate")
	for _, c := range caseDirs(t, root) {
		t.Run(c, func(t *testing.T) {
			if _, err := rules.Load(filepath.Join(root, c, "ruled"), builtinCatalog()); err != nil {
				t.Errorf("the generated rules do not load:\n%v", err)
			}
		})
	}
}
