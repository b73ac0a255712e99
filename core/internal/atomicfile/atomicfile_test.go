package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestWriteReplacesWithMode(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || string(b) != "new" {
		t.Fatalf("contents %q, %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".f.json.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestWriteFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "sub")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Renaming a file over a non-empty directory fails.
	if err := Write(target, []byte("data"), 0o600); err == nil {
		t.Fatal("Write over a non-empty directory succeeded")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".sub.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left after a failure: %v", left)
	}
}

func TestFollowLinks(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real.json")
	if err := os.Symlink("real.json", filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("link.json", filepath.Join(dir, "link2.json")); err != nil {
		t.Fatal(err)
	}
	// A chain ending in a dangling link resolves to the missing target.
	if got := FollowLinks(filepath.Join(dir, "link2.json")); got != real {
		t.Errorf("FollowLinks = %s, want %s", got, real)
	}
	if got := FollowLinks(real); got != real {
		t.Errorf("FollowLinks of a plain path = %s", got)
	}
	loop := filepath.Join(dir, "loop")
	if err := os.Symlink("loop", loop); err != nil {
		t.Fatal(err)
	}
	if got := FollowLinks(loop); got != loop {
		t.Errorf("FollowLinks of a loop = %s, want it to give up at %s", got, loop)
	}
}
