package identity_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/identity"
)

// dataTree writes a watched tree: a server, a helper script, a .gitignore
// that marks the server's data, a nested .gitignore, and data files.
func dataTree(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "server.py"), "print('hi')\n", 0o644)
	write(t, filepath.Join(dir, ".gitignore"), "# the server's state\nledger.jsonl\nstate/\n*.db\n", 0o644)
	write(t, filepath.Join(dir, "ledger.jsonl"), "{}\n", 0o644)
	write(t, filepath.Join(dir, "server.log"), "started\n", 0o644)
	write(t, filepath.Join(dir, "state", "cache.bin"), "x", 0o644)
	write(t, filepath.Join(dir, "sub", ".gitignore"), "*.dat\n", 0o644)
	write(t, filepath.Join(dir, "sub", "x.dat"), "x", 0o644)
	write(t, filepath.Join(dir, "y.dat"), "y", 0o644)
	return dir
}

// TestDataIsNotCode: what a tree's .gitignore files, the default ignores
// and the configured patterns mark is left out of its digest, so that the
// server writing its ledger, log or cache is no new code; anything else
// still changes the digest.
func TestDataIsNotCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		patterns []string
		edit     string // relative path written (created or changed)
		code     bool   // the digest must change
	}{
		{"ledger named in .gitignore", nil, "ledger.jsonl", false},
		{"log (default ignore)", nil, "server.log", false},
		{"file in an ignored directory", nil, "state/cache.bin", false},
		{"new file in an ignored directory", nil, "state/other.bin", false},
		{"sqlite journal (default ignore)", nil, "app.db-journal", false},
		{"pattern of .gitignore", nil, "new.db", false},
		{"nested .gitignore applies below it", nil, "sub/x.dat", false},
		{"nested .gitignore does not apply above it", nil, "y.dat", true},
		{"compiled Python (default ignore)", nil, "__pycache__/server.cpython-312.pyc", false},
		{"version control metadata (default ignore)", nil, ".git/index", false},
		{"configured pattern", []string{"uploads/**"}, "uploads/a.png", false},
		{"source file", nil, "server.py", true},
		{"data file nothing marks", nil, "notes.txt", true},
		{"the .gitignore itself", nil, ".gitignore", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dataTree(t)
			m := identity.NewMeasurer(nil)
			before, err := m.DigestTreeData(dir, tc.patterns, nil)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, tc.edit)
			old, _ := os.ReadFile(p)
			write(t, p, string(old)+"more\n", 0o644)
			after, err := m.DigestTreeData(dir, tc.patterns, nil)
			if err != nil {
				t.Fatal(err)
			}
			if changed := before != after; changed != tc.code {
				t.Errorf("writing %s: digest changed %v, want %v", tc.edit, changed, tc.code)
			}
		})
	}
}

// TestIgnoreNeverHidesCode: the server or the agent can write .gitignore
// (or a person be talked into an ignore pattern); no pattern leaves out a
// source file, an executable, a "#!" script, a file the record measures
// by name, or code inside an ignored directory. And a .gitignore that
// starts ignoring something is itself a change.
func TestIgnoreNeverHidesCode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ignore   string   // the .gitignore written by the attacker
		patterns []string // configured patterns
		file     string   // the code changed afterwards
		mode     os.FileMode
		content  string
		code     bool // passed as a file the record measures by name
	}{
		{"server.js named", "server.js\n", nil, "server.js", 0o644, "evil()\n", false},
		{"everything", "*\n", nil, "server.js", 0o644, "evil()\n", false},
		{"an executable", "helper\n", nil, "helper", 0o755, "\x7fELF evil", false},
		{"a #! script", "run\n", nil, "run", 0o644, "#!/bin/sh\nevil\n", false},
		{"code inside an ignored directory", "lib/\n", nil, "lib/evil.js", 0o644, "evil()\n", false},
		{"a compiled module", "*.so\n", nil, "ext.so", 0o644, "\x7fELF", false},
		{"the entry, by configured pattern", "", []string{"main"}, "main", 0o644, "print('evil')\n", true},
		{"the entry, by .gitignore", "main\n", nil, "main", 0o644, "print('evil')\n", true},
		{"a project file", "*.json\n", nil, "package.json", 0o644, `{"main":"evil.js"}`, false},
		{"python path file", "*.pth\n", nil, "x.pth", 0o644, "import evil\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := dataTree(t)
			target := filepath.Join(dir, tc.file)
			write(t, target, "original\n", tc.mode)
			var code []string
			if tc.code {
				code = []string{target}
			}
			m := identity.NewMeasurer(nil)
			before, err := m.DigestTreeData(dir, tc.patterns, code)
			if err != nil {
				t.Fatal(err)
			}
			if tc.ignore != "" {
				write(t, filepath.Join(dir, ".gitignore"), tc.ignore, 0o644)
				withIgnore, err := m.DigestTreeData(dir, tc.patterns, code)
				if err != nil {
					t.Fatal(err)
				}
				if withIgnore == before {
					t.Fatalf("rewriting .gitignore did not change the digest")
				}
				before = withIgnore
			}
			write(t, target, tc.content, tc.mode)
			after, err := m.DigestTreeData(dir, tc.patterns, code)
			if err != nil {
				t.Fatal(err)
			}
			if after == before {
				t.Errorf("%s changed, hidden by %q %v: the digest stayed %s", tc.file, tc.ignore, tc.patterns, after)
			}
		})
	}
}

// TestDataFilter: the build watcher asks the record's rules about each
// changed path; data is what cannot change the record.
func TestDataFilter(t *testing.T) {
	dir := dataTree(t)
	write(t, filepath.Join(dir, "helper"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "run"), "#!/bin/sh\n", 0o644)
	write(t, filepath.Join(dir, ".gitignore"), "ledger.jsonl\nstate/\nhelper\nrun\nserver.py\nlib/\nmain\n", 0o644)
	write(t, filepath.Join(dir, "main"), "print(1)\n", 0o644) // a wrapper's script, by name only
	write(t, filepath.Join(dir, "lib", "x.js"), "1\n", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "state", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	pkg, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(pkg, "package.json"), "{}", 0o644)
	write(t, filepath.Join(pkg, "server.js"), "1", 0o644)
	write(t, filepath.Join(pkg, "ledger.db"), "x", 0o644)
	write(t, filepath.Join(pkg, "node_modules", "a", "README.md"), "x", 0o644)
	write(t, filepath.Join(pkg, "tool"), "#!/bin/sh\n", 0o755)
	rec := identity.Record{
		WorkingDirectory: dir,
		Entry:            filepath.Join(pkg, "server.js"),
		ExtraDigests:     map[string]string{".": "sha256:x"},
		Package:          &identity.PackageDigest{Dir: pkg},
		Wrappers:         []identity.FileDigest{{Path: filepath.Join(dir, "main")}},
		Ignore:           []string{"uploads/"},
	}
	f := identity.NewDataFilter(rec)
	for _, tc := range []struct {
		path string
		data bool
	}{
		{filepath.Join(dir, "ledger.jsonl"), true},
		{filepath.Join(dir, "server.log"), true},
		{filepath.Join(dir, "state", "cache.bin"), true},
		{filepath.Join(dir, "state", "empty"), true},
		{filepath.Join(dir, "uploads", "a.png"), true},
		{filepath.Join(dir, "gone.log"), true},
		{filepath.Join(dir, "server.py"), false}, // source, whatever .gitignore says
		{filepath.Join(dir, "helper"), false},    // executable
		{filepath.Join(dir, "run"), false},       // #!
		{filepath.Join(dir, "main"), false},      // measured by name
		{filepath.Join(dir, "lib"), false},       // a directory with code in it
		{filepath.Join(dir, "lib", "x.js"), false},
		{filepath.Join(dir, ".gitignore"), false},
		{filepath.Join(dir, "notes.txt"), false}, // nothing marks it
		{filepath.Join(dir, "gone"), false},      // gone, perhaps a directory of code
		{filepath.Join(pkg, "ledger.db"), true},  // a package measures its sources only
		{filepath.Join(pkg, "server.js"), false},
		{filepath.Join(pkg, "package.json"), false},
		{filepath.Join(pkg, "node_modules", "a", "README.md"), false}, // dependencies are measured whole
		{filepath.Join(pkg, ".cache", "x"), true},
		{"/elsewhere/x.log", false},
		{dir, false},
	} {
		if got := f.IsData(tc.path); got != tc.data {
			t.Errorf("IsData(%s) = %v, want %v", tc.path, got, tc.data)
		}
	}
}

// TestMeasureIgnoresDataInWatchedTree: Measure applies the rules to its
// watched directories, and the entry is code there whatever a pattern
// says.
func TestMeasureIgnoresDataInWatchedTree(t *testing.T) {
	py := realPythonPath(t)
	dir := dataTree(t)
	write(t, filepath.Join(dir, "main"), "print('hi')\n", 0o644)
	m := identity.NewMeasurer(nil)
	spec := identity.MeasureSpec{Command: py, Args: []string{"main"}, Dir: dir, Extra: []string{"."}, Ignore: []string{"main", "uploads/"}}
	before, err := m.Measure(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if before.Entry != filepath.Join(dir, "main") {
		t.Fatalf("entry %q", before.Entry)
	}
	write(t, filepath.Join(dir, "ledger.jsonl"), "{}\n{}\n", 0o644)
	write(t, filepath.Join(dir, "uploads", "a"), "x", 0o644)
	same, err := m.Measure(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if d := identity.Diff(before, same); len(d) != 0 {
		t.Errorf("data written, changes: %+v", d)
	}
	write(t, filepath.Join(dir, "main"), "print('evil')\n", 0o644)
	after, err := m.Measure(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if after.ExtraDigests["."] == before.ExtraDigests["."] {
		t.Errorf("the entry changed under an ignore pattern and the watched tree's digest stayed the same")
	}
}

func realPythonPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/bin/python3", "/usr/local/bin/python3"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	t.Skip("no python3 in /usr/bin")
	return ""
}

// TestIgnoreFIFOsDoNotStall: a server that puts a FIFO where a .gitignore
// or an ignored file is cannot stall the measurement or the watcher
// (opening a FIFO for reading waits for a writer).
func TestIgnoreFIFOsDoNotStall(t *testing.T) {
	dir := dataTree(t)
	if err := os.Remove(filepath.Join(dir, ".gitignore")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dir, ".gitignore"), filepath.Join(dir, "sub", "pipe.dat")} {
		if err := mkfifo(p); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	done := make(chan error, 1)
	go func() {
		_, err := identity.NewMeasurer(nil).DigestTreeData(dir, nil, nil)
		if err == nil {
			f := identity.NewDataFilter(identity.Record{WorkingDirectory: dir, ExtraDigests: map[string]string{".": "x"}})
			_ = f.IsData(filepath.Join(dir, "sub", "pipe.dat"))
			_ = f.IsData(filepath.Join(dir, "x.log"))
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("measuring a tree with FIFOs did not return")
	}
}

// TestDataFilterThroughSymlink: the watched directory named through a
// symlink (macOS's /var → /private/var, a link to a project): events come
// under the name the watcher was given, and under the real one.
func TestDataFilterThroughSymlink(t *testing.T) {
	dir := dataTree(t)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	f := identity.NewDataFilter(identity.Record{WorkingDirectory: link, ExtraDigests: map[string]string{".": "x"}})
	for _, root := range []string{link, dir} {
		if !f.IsData(filepath.Join(root, "ledger.jsonl")) {
			t.Errorf("%s/ledger.jsonl is not data", root)
		}
		if f.IsData(filepath.Join(root, "server.py")) {
			t.Errorf("%s/server.py is data", root)
		}
	}
}
