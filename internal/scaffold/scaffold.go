// Package scaffold writes new plugin projects, the files `ruled plugin new`
// creates: an algorithm, its Lua script, a reference model, tests that run
// the conformance kit, a rule file and a README, in Go, AssemblyScript or
// Rust.
//
// A project builds against the SDK and the conformance kit of the ruled
// that wrote it: both are carried in this package (bundle.txtar, generated
// from the repository by TestBundleIsCurrent -update) and written beside
// the project in .ruled/, which go.mod names in replace lines. The plugin
// then needs nothing unpublished, and its SDK is the daemon's. With
// Options.SDKVersion the project requires published modules instead.
package scaffold

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/tools/txtar"
)

// bundle holds the SDK modules (sdk/, sdk/process/) and the conformance
// kit (kit/: the packages of ruled's module that plugintest, host/wasm and
// host/process need, with a go.mod of their own).
//
//go:embed bundle.txtar
var bundle []byte

// templates holds one directory per layer of a project; a project is
// written from the layers its language and kind name (layers). In file
// names and contents, __NAME__ is the plugin's name, __PKG__ its Go package
// name, __CRATE__ its Rust crate name and __MODULE__ the Go module path. A
// .tmpl suffix, which keeps Go sources out of ruled's own build, is dropped.
//
//go:embed all:templates
var templates embed.FS

// BundleDir is the directory, inside a project, that holds the SDK and the
// conformance kit ruled carries.
const BundleDir = ".ruled"

// SDKVersion is the version the SDK modules have in ruled's go.mod, and in
// a project's go.mod when they come from the bundle.
const SDKVersion = "v0.1.0"

// kitVersion is the version a project's go.mod requires ruled's module
// (the conformance kit) at when it comes from the bundle; the replace line
// makes any version the bundle's.
const kitVersion = "v0.0.0"

// Languages and kinds a project can be written in.
const (
	LangGo             = "go"
	LangAssemblyScript = "assemblyscript"
	LangRust           = "rust"
	KindWasm           = "wasm"
	KindProcess        = "process"
)

// layers are the template directories of each language and kind, written
// in order (a later layer's file replaces an earlier one's).
var layers = map[[2]string][]string{
	{LangGo, KindWasm}:             {"common", "go", "go-wasm"},
	{LangGo, KindProcess}:          {"common", "go", "go-process"},
	{LangAssemblyScript, KindWasm}: {"common", "harness", "assemblyscript"},
	{LangRust, KindWasm}:           {"common", "harness", "rust"},
}

// Options say what project to write.
type Options struct {
	// Name is the plugin's name: a lower-case letter, then lower-case
	// letters, digits and single hyphens, at most 40 characters.
	Name string
	// Lang is LangGo (the default), LangAssemblyScript or LangRust.
	Lang string
	// Kind is KindWasm (the default) or KindProcess (Go only).
	Kind string
	// Module is the project's Go module path (default example.com/NAME).
	Module string
	// SDKVersion, when set, makes go.mod require the published SDK modules
	// and ruled's module at this version, with no replace lines and no
	// bundle; by default the project builds against the bundle.
	SDKVersion string
	// Ruled is the version of ruled writing the project, recorded in the
	// bundle's VERSION file.
	Ruled string
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

var versionRE = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

// check fills in defaults and refuses what cannot be written.
func (o *Options) check() error {
	if !nameRE.MatchString(o.Name) || len(o.Name) > 40 {
		return fmt.Errorf("plugin name %q: want a lower-case letter, then lower-case letters, digits and single hyphens, at most 40 characters", o.Name)
	}
	if o.Lang == "" {
		o.Lang = LangGo
	}
	if o.Kind == "" {
		o.Kind = KindWasm
	}
	if _, ok := layers[[2]string{o.Lang, o.Kind}]; !ok {
		switch o.Lang {
		case LangGo, LangAssemblyScript, LangRust:
		default:
			return fmt.Errorf("language %q: want go, assemblyscript or rust", o.Lang)
		}
		if o.Kind != KindWasm && o.Kind != KindProcess {
			return fmt.Errorf("kind %q: want wasm or process", o.Kind)
		}
		return fmt.Errorf("a %s plugin is a Wasm module only: process plugins are written in Go (docs/plugins.md)", o.Lang)
	}
	if o.Module == "" {
		o.Module = "example.com/" + o.Name
	}
	if strings.ContainsAny(o.Module, " \t\n\"`") {
		return fmt.Errorf("module path %q: no spaces or quotes", o.Module)
	}
	if o.SDKVersion != "" && !versionRE.MatchString(o.SDKVersion) {
		return fmt.Errorf("SDK version %q: want a semantic version such as v0.2.0", o.SDKVersion)
	}
	return nil
}

// New writes a project into dir, which must not exist or be empty, and
// returns the paths it wrote, relative to dir, the bundle's last.
func New(dir string, o Options) ([]string, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return nil, fmt.Errorf("%s is not empty", dir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	files, err := projectFiles(o)
	if err != nil {
		return nil, err
	}
	if o.SDKVersion == "" {
		kit, err := bundleFiles(o.Ruled)
		if err != nil {
			return nil, err
		}
		files = append(files, kit...)
	}
	return writeFiles(dir, files)
}

// writeFiles writes files under dir and returns the names it wrote.
func writeFiles(dir string, files []txtar.File) ([]string, error) {
	var wrote []string
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return wrote, err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return wrote, err
		}
		wrote = append(wrote, f.Name)
	}
	return wrote, nil
}

// projectFiles are the project's own files: its layers' templates, filled
// in, and its go.mod.
func projectFiles(o Options) ([]txtar.File, error) {
	pkg := strings.ReplaceAll(o.Name, "-", "")
	fill := strings.NewReplacer("__NAME__", o.Name, "__PKG__", pkg, "__CRATE__", strings.ReplaceAll(o.Name, "-", "_"), "__MODULE__", o.Module)
	byName := map[string][]byte{}
	for _, layer := range layers[[2]string{o.Lang, o.Kind}] {
		root := path.Join("templates", layer)
		err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := templates.ReadFile(p)
			if err != nil {
				return err
			}
			name := fill.Replace(strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl"))
			byName[name] = []byte(fill.Replace(string(data)))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("templates: %w", err)
		}
	}
	byName["go.mod"] = goMod(o)
	names := slices.Sorted(maps.Keys(byName))
	files := make([]txtar.File, 0, len(names))
	for _, n := range names {
		files = append(files, txtar.File{Name: n, Data: byName[n]})
	}
	return files, nil
}

// goMod is the project's go.mod before `go mod tidy`: the SDK modules and
// ruled's (the conformance kit, for tests), from the bundle or published.
func goMod(o Options) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "module %s\n\ngo 1.26.0\n\n", o.Module)
	sdk, kit := SDKVersion, kitVersion
	if o.SDKVersion != "" {
		sdk, kit = o.SDKVersion, o.SDKVersion
	}
	fmt.Fprintf(&b, "require (\n\tgithub.com/ruled-dev/ruled %s\n\tgithub.com/ruled-dev/ruled/sdk %s\n\tgithub.com/ruled-dev/ruled/sdk/process %s\n)\n", kit, sdk, sdk)
	if o.SDKVersion == "" {
		fmt.Fprintf(&b, "\n// The SDK and the conformance kit of the ruled that wrote this project\n"+
			"// (%s/VERSION): a plugin builds against the SDK of the daemon that runs it.\n"+
			"replace (\n\tgithub.com/ruled-dev/ruled => ./%s/kit\n\tgithub.com/ruled-dev/ruled/sdk => ./%s/sdk\n\tgithub.com/ruled-dev/ruled/sdk/process => ./%s/sdk/process\n)\n",
			BundleDir, BundleDir, BundleDir, BundleDir)
	}
	return b.Bytes()
}

// bundleFiles are the bundle's files under BundleDir, with a README and
// the VERSION of the ruled that wrote them.
func bundleFiles(ruled string) ([]txtar.File, error) {
	a := txtar.Parse(bundle)
	if len(a.Files) == 0 {
		return nil, errors.New("this ruled was built without its SDK bundle (internal/scaffold/bundle.txtar)")
	}
	files := make([]txtar.File, 0, len(a.Files)+2)
	for _, f := range a.Files {
		files = append(files, txtar.File{Name: path.Join(BundleDir, f.Name), Data: f.Data})
	}
	if ruled == "" {
		ruled = "unknown"
	}
	files = append(files,
		txtar.File{Name: path.Join(BundleDir, "README.md"), Data: []byte(bundleReadme)},
		txtar.File{Name: path.Join(BundleDir, "VERSION"), Data: []byte("ruled " + ruled + "\n")})
	return files, nil
}

const bundleReadme = `# .ruled: the SDK and the conformance kit of the ruled that wrote this project

` + "`ruled plugin new`" + ` wrote these files; go.mod points at them with replace lines, so the plugin
builds against the SDK of the daemon that will run it (VERSION says which) and needs nothing
unpublished. Do not edit them. To move to another ruled, run ` + "`ruled plugin sdk`" + ` with that ruled in
this directory's parent: it rewrites this directory.

- sdk/          github.com/ruled-dev/ruled/sdk, the SDK a plugin imports
- sdk/process/  github.com/ruled-dev/ruled/sdk/process, for process plugins
- kit/          the part of github.com/ruled-dev/ruled the tests use: plugintest (the conformance
                kit), host/wasm and host/process (the drivers that load a built plugin)
`

// WriteBundle replaces the bundle in an existing project directory with
// this ruled's: what `ruled plugin sdk` does.
func WriteBundle(dir, ruled string) ([]string, error) {
	mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return nil, fmt.Errorf("%s has no go.mod: not a plugin project", dir)
	}
	// A project on the published SDK (--sdk) would get a bundle its go.mod
	// never reads.
	if !strings.Contains(string(mod), "=> ./"+BundleDir+"/sdk\n") {
		return nil, fmt.Errorf("%s/go.mod does not replace the SDK with ./%s/sdk: its SDK is not the bundle's (a project on published modules changes version in go.mod)", dir, BundleDir)
	}
	files, err := bundleFiles(ruled)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(filepath.Join(dir, BundleDir)); err != nil {
		return nil, err
	}
	return writeFiles(dir, files)
}
