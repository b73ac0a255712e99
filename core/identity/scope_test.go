package identity

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Without watch paths, the entry's package is measured: an edited sibling
// module or dependency changes the record and names the file; data files
// and caches do not.
func TestPackageScope(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"package.json":                  `{"name":"srv"}`,
		"src/server.js":                 "require('./helper')",
		"src/helper.js":                 "v1",
		"node_modules/mylib/index.js":   "lib v1",
		"node_modules/mylib/README":     "docs",
		"data.db":                       "rows",
		".git/HEAD":                     "ref",
		"src/__pycache__/x.cpython.pyc": "cache",
	})
	node := filepath.Join(root, "bin", "node")
	writeTree(t, root, map[string]string{"bin/node": "\x7fELF fake"})
	if err := os.Chmod(node, 0o755); err != nil {
		t.Fatal(err)
	}
	m := NewMeasurer(nil)
	m.versionTimeout = time.Millisecond
	spec := MeasureSpec{Label: "srv", Command: node, Args: []string{"src/server.js"}, Dir: root}
	measure := func() Record {
		t.Helper()
		rec, err := m.Measure(context.Background(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	a := measure()
	real, _ := filepath.EvalSymlinks(root)
	if a.Package == nil || a.Package.Dir != real || a.Package.Measured != "sources, node_modules" {
		t.Fatalf("package = %+v, want %s measuring sources, node_modules", a.Package, real)
	}
	// package.json, the two sources, both files of mylib.
	if a.Package.Files != 5 {
		t.Errorf("package covers %d files, want 5", a.Package.Files)
	}
	// Data and caches change nothing.
	writeTree(t, root, map[string]string{"data.db": "more rows", ".git/HEAD": "other", "src/__pycache__/x.cpython.pyc": "new"})
	if d := Diff(a, measure()); len(d) != 0 {
		t.Errorf("data and cache writes changed the identity: %+v", d)
	}
	for _, tc := range []struct{ file, content string }{
		{"src/helper.js", "v2"},
		{"node_modules/mylib/index.js", "lib v2"},
	} {
		before := measure()
		writeTree(t, root, map[string]string{tc.file: tc.content})
		after := measure()
		d := Diff(before, after)
		if len(d) != 1 || d[0].Field != "package" || !slices.Equal(d[0].Files, []string{tc.file}) {
			t.Errorf("after editing %s: Diff = %+v, want one package change naming it", tc.file, d)
		}
		// Measured again (the launch after the build): still named.
		if d := Diff(before, measure()); len(d) != 1 || !slices.Equal(d[0].Files, []string{tc.file}) {
			t.Errorf("measured again after editing %s: Diff = %+v", tc.file, d)
		}
	}
	// A watch path replaces the package scope.
	spec.Extra = []string{"src"}
	if rec := measure(); rec.Package != nil || rec.ExtraDigests["src"] == "" {
		t.Errorf("with --watch src: package %+v, extra %v", rec.Package, rec.ExtraDigests)
	}
}

func TestPackageDir(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"proj/pyproject.toml": "", "proj/pkg/mod/server.py": "", "loose/server.py": ""})
	if got := packageDir(filepath.Join(root, "proj/pkg/mod/server.py")); got != filepath.Join(root, "proj") {
		t.Errorf("packageDir = %s, want the pyproject directory", got)
	}
	if got := packageDir(filepath.Join(root, "loose/server.py")); got != filepath.Join(root, "loose") {
		t.Errorf("packageDir without project file = %s, want the entry's directory", got)
	}
	if got := packageDir("/usr/lib/node_modules/x/index.js"); got != "" && got != "/usr/lib/node_modules/x" {
		t.Errorf("packageDir in a system directory = %s", got)
	}
}
