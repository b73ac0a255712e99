package ids_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const idsPath = "github.com/portcullis/portcullis/core/ids"

// listed is what `go list -json -export` says of a package.
type listed struct {
	ImportPath      string
	Dir             string
	CompiledGoFiles []string
	Export          string
	ImportMap       map[string]string
	Module          *struct{ Path string }
	Error           *struct{ Err string }
}

// listModule lists the module's packages and their test variants with
// the export data of everything they import (built as `go vet` builds it).
func listModule(t *testing.T, patterns ...string) (mine []*listed, exports map[string]string) {
	t.Helper()
	args := append([]string{"list", "-e", "-export", "-compiled", "-deps", "-test", "-tags", "ci",
		"-json=ImportPath,Dir,CompiledGoFiles,Export,ImportMap,Module,Error"}, patterns...)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	exports = map[string]string{}
	all := map[string]*listed{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		p := new(listed)
		if err := dec.Decode(p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		exports[p.ImportPath] = p.Export
		all[p.ImportPath] = p
	}
	for id, p := range all {
		if p.Module == nil || !strings.HasPrefix(p.Module.Path, "github.com/portcullis/portcullis") || strings.HasSuffix(id, ".test") {
			continue
		}
		// A package with tests is checked in its test variant, which
		// holds its files and its tests' files.
		if base, _, variant := strings.Cut(id, " "); !variant && all[base+" ["+base+".test]"] != nil {
			continue
		}
		mine = append(mine, p)
	}
	return mine, exports
}

// check type-checks the files of p against the export data of its imports
// and returns what idTraps finds in them.
func check(p *listed, exports map[string]string, extra map[string]string) ([]string, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range p.CompiledGoFiles {
		if !filepath.IsAbs(name) {
			name = filepath.Join(p.Dir, name)
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	for name, src := range extra {
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if id, ok := p.ImportMap[path]; ok {
			path = id
		}
		if exports[path] == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(exports[path])
	})
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: imp}
	name := strings.Fields(p.ImportPath)[0]
	if _, err := conf.Check(name, fset, files, info); err != nil {
		return nil, err
	}
	var found []string
	for _, f := range files {
		found = append(found, idTraps(fset, f, info)...)
	}
	return found, nil
}

// isID reports whether t is one of the identifier types of package ids.
func isID(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == idsPath && strings.HasSuffix(n.Obj().Name(), "ID")
}

func isInterface(t types.Type) bool {
	_, ok := t.Underlying().(*types.Interface)
	return ok
}

// idTraps finds the expressions that compare an interface value with a
// typed identifier: they compile, and they are false whenever the
// interface holds a plain string, as every JSON value decoded into an any
// does (f["agentRun"] == run). The same goes for a map keyed by an
// interface indexed with an identifier, a type assertion or a type switch
// case to an identifier type, and a switch on an interface with an
// identifier case.
func idTraps(fset *token.FileSet, f *ast.File, info *types.Info) []string {
	var found []string
	typeOf := func(e ast.Expr) types.Type { return info.Types[e].Type }
	report := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%s: %s", fset.Position(n.Pos()), what))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				break
			}
			x, y := typeOf(n.X), typeOf(n.Y)
			if x != nil && y != nil && (isID(x) && isInterface(y) || isID(y) && isInterface(x)) {
				report(n, fmt.Sprintf("%s compares an interface value with a typed identifier (always false for a decoded string)", types.ExprString(n)))
			}
		case *ast.IndexExpr:
			if m, ok := typeOf(n.X).(*types.Map); ok && isInterface(m.Key()) && isID(typeOf(n.Index)) {
				report(n, fmt.Sprintf("%s indexes a map keyed by an interface with a typed identifier", types.ExprString(n)))
			}
		case *ast.TypeAssertExpr:
			if n.Type != nil && isID(typeOf(n.Type)) {
				report(n, fmt.Sprintf("%s asserts an identifier type (a decoded value is a string)", types.ExprString(n)))
			}
		case *ast.TypeSwitchStmt:
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					if isID(typeOf(e)) {
						report(e, "a type switch case of an identifier type (a decoded value is a string)")
					}
				}
			}
		case *ast.SwitchStmt:
			if n.Tag == nil || !isInterface(typeOf(n.Tag)) {
				break
			}
			for _, s := range n.Body.List {
				for _, e := range s.(*ast.CaseClause).List {
					if isID(typeOf(e)) {
						report(e, fmt.Sprintf("case %s compares an interface value with a typed identifier", types.ExprString(e)))
					}
				}
			}
		}
		return true
	})
	return found
}

// TestNoInterfaceComparedWithID: nowhere in the module (its tests
// included) is an interface value compared with a typed identifier. Audit
// fields decoded into a map[string]any hold strings: comparing one with a
// RunID compiles and is never true, and go vet does not say so.
func TestNoInterfaceComparedWithID(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the export data of the whole module")
	}
	pkgs, exports := listModule(t, "./...")
	var checked, files int
	for _, p := range pkgs {
		found, err := check(p, exports, nil)
		if err != nil {
			t.Errorf("type-checking %s: %v", p.ImportPath, err)
			continue
		}
		checked, files = checked+1, files+len(p.CompiledGoFiles)
		for _, f := range found {
			t.Error(f)
		}
	}
	if checked < 30 || files < 300 {
		t.Errorf("checked %d packages, %d files: is the list right?", checked, files)
	}
}

// TestIDTrapsFound: the check finds each kind of trap in a file written
// for it, and passes the comparisons that are right.
func TestIDTrapsFound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the export data of the whole module")
	}
	pkgs, exports := listModule(t, "./core/ids")
	var self *listed
	for _, p := range pkgs {
		if strings.HasPrefix(p.ImportPath, idsPath+"_test ") {
			self = p
		}
	}
	if self == nil {
		t.Fatal("go list did not list this test package")
	}
	const src = `package ids_test

import "github.com/portcullis/portcullis/core/ids"

func traps(f map[string]any, v any, run ids.RunID, byAny map[any]bool) {
	_ = f["agentRun"] == run                // trap
	_ = run != f["agentRun"]                // trap
	_ = byAny[run]                          // trap
	_, _ = v.(ids.EpochID)                  // trap
	switch v {
	case run: // trap
	}
	_ = f["agentRun"] == string(run)        // right
	_ = f["agentRun"] == "01JQ"             // right
	_ = run == "01JQ"                       // right
	_ = byAny[string(run)]                  // right
}
`
	found, err := check(self, exports, map[string]string{"traps_test.go": src})
	if err != nil {
		t.Fatal(err)
	}
	var here []string
	for _, f := range found {
		if strings.HasPrefix(f, "traps_test.go:") {
			here = append(here, f)
		}
	}
	if len(here) != 5 {
		t.Errorf("found %d traps, want 5:\n%s", len(here), strings.Join(here, "\n"))
	}
	for _, f := range here {
		line, _ := strconv.Atoi(strings.SplitN(f, ":", 3)[1])
		if line < 1 || !strings.Contains(strings.Split(src, "\n")[line-1], "// trap") {
			t.Errorf("reported a right comparison: %s", f)
		}
	}
}
