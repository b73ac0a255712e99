package identity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The shared walk lists entries in filepath.WalkDir's order (which the tree
// digests are defined over), with names that sort differently as paths
// ("a.js" < "a/b" but the directory "a" comes first), across directories
// read on several goroutines.
func TestWalkOrderIsWalkDirs(t *testing.T) {
	root := t.TempDir()
	files := map[string]string{"a.js": "1", "a/b.js": "2", "a-b/c.js": "3", "a/b/c.js": "4", "B.js": "5", "z/y/x/w.js": "6"}
	for d := range 40 {
		files[fmt.Sprintf("m/dep%02d/i.js", d)] = fmt.Sprint(d)
		files[fmt.Sprintf("m/dep%02d/sub/j.js", d)] = fmt.Sprint(d)
	}
	writeTree(t, root, files)
	if err := os.Symlink("a.js", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(root)
	var want []string
	err := filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(real, p)
		want = append(want, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMeasurer(nil)
	items, err := m.walkTree(real, walkRules{root: true})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(items))
	for i, it := range items {
		got[i] = it.rel
		if it.kind == kindFile && (!it.cached || it.sum == [32]byte{}) {
			t.Errorf("%s: file not summed", it.rel)
		}
		if it.rel == "link" && (it.kind != kindSymlink || it.target != "a.js") {
			t.Errorf("link listed as kind %c target %q", it.kind, it.target)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("walk order\n got %q\nwant %q", got, want)
	}
}

// A warm walk reads no file: a file whose (device, inode, size, mtime,
// ctime) did not change takes its sum from the cache (here planted, so that
// a read would show), and a rewritten file is hashed again.
func TestWalkWarmUsesCache(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{"node_modules/x/a.js": "a", "src/b.js": "b"})
	m := NewMeasurer(nil)
	m.now = func() time.Time { return time.Now().Add(time.Hour) } // files count as settled
	first, err := m.DigestPackage(root)
	if err != nil {
		t.Fatal(err)
	}
	real, _ := filepath.EvalSymlinks(root)
	a := filepath.Join(real, "node_modules", "x", "a.js")
	m.mu.Lock()
	c, ok := m.files[a]
	if ok {
		c.sum[0] ^= 0xff
		m.files[a] = c
	}
	m.mu.Unlock()
	if !ok {
		t.Fatalf("%s not cached after the first walk", a)
	}
	planted, err := m.DigestPackage(root)
	if err != nil || planted.SHA256 == first.SHA256 {
		t.Fatalf("warm walk = %s, %v: want the planted sum used (a digest other than %s)", planted.SHA256, err, first.SHA256)
	}
	// A rewrite of the same size moves the key: the file is read again.
	if err := os.WriteFile(a, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(a, future, future); err != nil {
		t.Fatal(err)
	}
	again, err := m.DigestPackage(root)
	if err != nil || again.SHA256 != first.SHA256 {
		t.Fatalf("after the rewrite = %s, %v; want %s (the file read again)", again.SHA256, err, first.SHA256)
	}
}

// A directory that cannot be read fails the walk with its path.
func TestWalkErrorNamesPath(t *testing.T) {
	if os.Getuid() == 0 {
		t.Skip("root reads every directory")
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"src/a.js": "a", "locked/b.js": "b"})
	locked := filepath.Join(root, "locked")
	if err := os.Chmod(locked, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(locked, 0o755)
	_, err := NewMeasurer(nil).DigestTree(root)
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("DigestTree = %v, want a permission error naming locked", err)
	}
}

// DigestTree of a single file takes its sum from the cache too.
func TestWalkFileRootUsesCache(t *testing.T) {
	p := filepath.Join(t.TempDir(), "server.js")
	writeTree(t, filepath.Dir(p), map[string]string{"server.js": "v1"})
	real, _ := filepath.EvalSymlinks(p)
	m := NewMeasurer(nil)
	m.now = func() time.Time { return time.Now().Add(time.Hour) } // files count as settled
	first, err := m.DigestTree(p)
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	c, ok := m.files[real]
	c.sum[0] ^= 0xff
	m.files[real] = c
	m.mu.Unlock()
	if !ok {
		t.Fatalf("%s not cached", real)
	}
	if again, err := m.DigestTree(p); err != nil || again == first {
		t.Errorf("DigestTree of an unchanged file = %s, %v: want the planted sum used", again, err)
	}
}
