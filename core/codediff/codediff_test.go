package codediff

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func write(t testing.TB, root, rel, text string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func take(t testing.TB, root string, lim Limits) *Snapshot {
	t.Helper()
	s, err := Take(root, lim)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCompareShowsTheEditedLines(t *testing.T) {
	root := t.TempDir()
	write(t, root, "server.py", "import sys\n\ndef greet(name):\n    return 'hello ' + name\n")
	write(t, root, "lib/util.py", "X = 1\n")
	write(t, root, "gone.txt", "bye\n")
	old := take(t, root, DefaultLimits)

	write(t, root, "server.py", "import sys\nimport os\n\ndef greet(name):\n    os.system('curl evil')\n    return 'hello ' + name\n")
	write(t, root, "new.py", "print(1)\n")
	os.Remove(filepath.Join(root, "gone.txt"))
	now := take(t, root, DefaultLimits)

	got := Compare(old, now)
	want := map[string]struct {
		kind         string
		added, remov int
	}{
		"gone.txt":  {Removed, 0, 1},
		"new.py":    {Added, 1, 0},
		"server.py": {Modified, 2, 0},
	}
	if len(got) != len(want) {
		t.Fatalf("changes %+v, want %d", got, len(want))
	}
	for _, c := range got {
		w, ok := want[c.Path]
		if !ok || c.Kind != w.kind || c.Added != w.added || c.Removed != w.remov {
			t.Errorf("%s: %s +%d -%d, want %+v", c.Path, c.Kind, c.Added, c.Removed, w)
		}
	}
	var diff string
	for _, c := range got {
		if c.Path == "server.py" {
			diff = c.Diff
		}
	}
	for _, s := range []string{"--- a/server.py", "+++ b/server.py", "+    os.system('curl evil')", "+import os"} {
		if !strings.Contains(diff, s) {
			t.Errorf("diff lacks %q:\n%s", s, diff)
		}
	}
	rep := Report{Since: "E1", Root: root, Changes: got}
	if s := rep.Summary(); !strings.HasPrefix(s, "3 files changed (+3 −1): gone.txt, new.py, server.py") {
		t.Errorf("summary %q", s)
	}
}

func TestIgnoredAndUnsafeFilesAreLeftOut(t *testing.T) {
	root := t.TempDir()
	write(t, root, ".gitignore", "data/\n*.db\n")
	write(t, root, "main.go", "package main\n")
	write(t, root, "data/ledger.json", "{}\n")
	write(t, root, "app.db", "x")
	write(t, root, "node_modules/x/index.js", "y")
	write(t, root, ".git/config", "[core]\n")
	write(t, root, "sub/.gitignore", "local.txt\n")
	write(t, root, "sub/local.txt", "z")
	write(t, root, "sub/kept.txt", "k")
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	write(t, outside, "secret", "s")
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	s := take(t, root, DefaultLimits) // a FIFO opened without O_NONBLOCK would hang here
	var got []string
	for p := range s.Files {
		got = append(got, p)
	}
	want := map[string]bool{".gitignore": true, "main.go": true, "sub/.gitignore": true, "sub/kept.txt": true}
	if len(got) != len(want) {
		t.Fatalf("files %v, want %v", got, want)
	}
	for _, p := range got {
		if !want[p] {
			t.Errorf("file %s kept", p)
		}
	}
}

func TestLimitsSummariseWhatTheyLeaveOut(t *testing.T) {
	root := t.TempDir()
	write(t, root, "a.txt", "one\n")
	write(t, root, "big.txt", strings.Repeat("x", 100))
	write(t, root, "bin.dat", "\x00\x01\x02")
	write(t, root, "server", "\x7fELF\x00"+strings.Repeat("z", 200)) // a compiled server over the size limit
	lim := Limits{MaxFiles: 10, MaxFileBytes: 50, MaxTotalBytes: 1 << 20}
	old := take(t, root, lim)
	write(t, root, "big.txt", strings.Repeat("y", 120))
	write(t, root, "bin.dat", "\x00\x01\x03\x04")
	write(t, root, "server", "\x7fELF\x00"+strings.Repeat("w", 210))
	now := take(t, root, lim)
	for _, c := range Compare(old, now) {
		switch c.Path {
		case "big.txt":
			if c.Diff != "" || !strings.Contains(c.Summary, "not kept") {
				t.Errorf("big.txt: %+v", c)
			}
		case "server":
			if !c.Binary || !strings.Contains(c.Summary, "binary") {
				t.Errorf("a large binary is not told binary: %+v", c)
			}
		case "bin.dat":
			if !c.Binary || c.Diff != "" || !strings.Contains(c.Summary, "binary, 3 bytes → 4 bytes") {
				t.Errorf("bin.dat: %+v", c)
			}
		default:
			t.Errorf("unexpected change %+v", c)
		}
	}
	few := take(t, root, Limits{MaxFiles: 1, MaxFileBytes: 50, MaxTotalBytes: 1 << 20})
	if len(few.Files) != 1 || few.Omitted != 3 {
		t.Errorf("MaxFiles 1: %d files, %d omitted", len(few.Files), few.Omitted)
	}
}

func TestSourceRoot(t *testing.T) {
	home := t.TempDir()
	repo := filepath.Join(home, "src", "srv")
	write(t, repo, ".git/HEAD", "ref: refs/heads/main\n")
	write(t, repo, "cmd/server/main.go", "package main\n")
	write(t, repo, "bin/server", "\x7fELF")
	plain := filepath.Join(home, "tools", "notes")
	write(t, plain, "notes.py", "print()\n")
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{filepath.Join(repo, "bin", "server")}, repo},                         // a compiled server: its sources' work tree
		{[]string{"/usr/bin/python3", filepath.Join(plain, "notes.py")}, plain},        // no git: the script's directory
		{[]string{filepath.Join(plain, "notes.py"), filepath.Join(repo, "bin")}, repo}, // a work tree wins
		{[]string{"/usr/bin/python3"}, ""},                                             // installed software is no source tree
		{[]string{filepath.Join(home, "x.py")}, ""},                                    // nor is the home itself
	} {
		if c.want == "" {
			write(t, home, "x.py", "")
		}
		got, ok := SourceRoot(home, c.paths...)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("SourceRoot(%v) = %q %v, want %q", c.paths, got, ok, c.want)
		}
	}
}
