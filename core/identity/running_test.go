package identity_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/portcullis/portcullis/core/identity"
)

func TestScriptOf(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "server.js")
	if err := os.WriteFile(script, []byte("//"), 0o644); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(script)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, exe string
		args      []string
		want      string
	}{
		{"node relative", "/usr/bin/node", []string{"node", "--enable-source-maps", "server.js"}, real},
		{"node eval", "/usr/bin/node", []string{"node", "-e", "1"}, ""},
		{"python -m", "/usr/bin/python3.11", []string{"python3", "-m", "server"}, ""},
		{"python by argv0", "/opt/py/bin/python3.11", []string{"/opt/py/bin/python3.11", "-u", script}, real},
		{"shell script", "/usr/bin/dash", []string{"/bin/sh", script}, real},
		{"shell -c", "/usr/bin/dash", []string{"sh", "-c", "exec node server.js"}, ""},
		{"not an interpreter", "/usr/bin/sleep", []string{"sleep", "server.js"}, ""},
		{"missing file", "/usr/bin/node", []string{"node", "gone.js"}, ""},
		{"no args", "/usr/bin/node", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := identity.ScriptOf(tc.exe, tc.args, dir); got != tc.want {
				t.Errorf("ScriptOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDigestOpen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("one"), 0o755); err != nil {
		t.Fatal(err)
	}
	m := identity.NewMeasurer(nil)
	want, err := m.DigestFile(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(2, 0); err != nil {
		t.Fatal(err)
	}
	got, err := m.DigestOpen(f)
	if err != nil || got != want {
		t.Fatalf("DigestOpen = %s, %v; want %s", got, err, want)
	}
	// A rewrite changes size and times, so the cache must not answer.
	if err := os.WriteFile(p, []byte("two!"), 0o755); err != nil {
		t.Fatal(err)
	}
	want2, _ := identity.NewMeasurer(nil).DigestFile(p)
	got2, err := m.DigestOpen(f)
	if err != nil || got2 != want2 || got2 == want {
		t.Fatalf("DigestOpen after rewrite = %s, %v; want %s", got2, err, want2)
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := m.DigestOpen(d); err == nil {
		t.Error("DigestOpen of a directory succeeded")
	}
}
