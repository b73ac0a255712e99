package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func mkfile(t testing.TB, path, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // umask-proof
		t.Fatal(err)
	}
}

// makeTree writes a small tree with files, an empty dir, a symlink and an
// executable.
func makeTree(t testing.TB, root string) {
	t.Helper()
	mkfile(t, filepath.Join(root, "a.txt"), "alpha", 0o644)
	mkfile(t, filepath.Join(root, "sub", "b.txt"), "beta", 0o644)
	mkfile(t, filepath.Join(root, "sub", "run"), "#!/bin/sh\n", 0o755)
	if err := os.MkdirAll(filepath.Join(root, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sub", "empty"} {
		if err := os.Chmod(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("sub/b.txt", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
}

func TestDigestTreeDeterministicAndSensitive(t *testing.T) {
	m := NewMeasurer(nil)
	a, b := t.TempDir(), t.TempDir()
	makeTree(t, a)
	makeTree(t, b)
	da, err := m.DigestTree(a)
	if err != nil {
		t.Fatal(err)
	}
	if db, err := m.DigestTree(b); err != nil || db != da {
		t.Fatalf("same content in two places: %s vs %s (%v)", da, db, err)
	}
	if !strings.HasPrefix(da, "sha256:") || len(da) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<hex>", da)
	}
	// Through a symlink to the root: same digest.
	ln := filepath.Join(t.TempDir(), "ln")
	if err := os.Symlink(a, ln); err != nil {
		t.Fatal(err)
	}
	if d, err := m.DigestTree(ln); err != nil || d != da {
		t.Errorf("via root symlink: %s, %v; want %s", d, err, da)
	}

	mutations := []struct {
		name string
		do   func(root string) error
	}{
		{"file content", func(r string) error { return os.WriteFile(filepath.Join(r, "a.txt"), []byte("alphA"), 0o644) }},
		{"file mode", func(r string) error { return os.Chmod(filepath.Join(r, "sub", "b.txt"), 0o600) }},
		{"rename", func(r string) error { return os.Rename(filepath.Join(r, "a.txt"), filepath.Join(r, "a2.txt")) }},
		{"new empty dir", func(r string) error { return os.Mkdir(filepath.Join(r, "empty", "x"), 0o755) }},
		{"new empty file", func(r string) error { return os.WriteFile(filepath.Join(r, "empty", "x"), nil, 0o644) }},
		{"symlink target", func(r string) error {
			os.Remove(filepath.Join(r, "link"))
			return os.Symlink("a.txt", filepath.Join(r, "link"))
		}},
		{"symlink target content", func(r string) error { return os.WriteFile(filepath.Join(r, "sub", "b.txt"), []byte("BETA"), 0o644) }},
		{"file moved between dirs", func(r string) error { return os.Rename(filepath.Join(r, "sub", "b.txt"), filepath.Join(r, "b.txt")) }},
	}
	for _, mu := range mutations {
		t.Run(mu.name, func(t *testing.T) {
			root := t.TempDir()
			makeTree(t, root)
			if err := mu.do(root); err != nil {
				t.Fatal(err)
			}
			d, err := m.DigestTree(root)
			if err != nil {
				t.Fatal(err)
			}
			if d == da {
				t.Errorf("digest unchanged after %s", mu.name)
			}
		})
	}
}

func TestDigestTreeKnownValue(t *testing.T) {
	// Pins the encoding: kind, mode (uint32 big endian), uvarint path length,
	// path, uvarint payload length, payload.
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mkfile(t, filepath.Join(root, "f"), "x", 0o644)
	fsum := sha256.Sum256([]byte("x"))
	var enc []byte
	enc = append(enc, 'd', 0, 0, 0x01, 0xed, 1, '.', 0)
	enc = append(enc, 'f', 0, 0, 0x01, 0xa4, 1, 'f', 32)
	enc = append(enc, fsum[:]...)
	want := sha256.Sum256(enc)
	got, err := NewMeasurer(nil).DigestTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if got != "sha256:"+hex.EncodeToString(want[:]) {
		t.Errorf("DigestTree = %s, want sha256:%x", got, want)
	}
}

func TestDigestFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	mkfile(t, p, "hello", 0o644)
	m := NewMeasurer(nil)
	got, err := m.DigestFile(p)
	want := sha256.Sum256([]byte("hello"))
	if err != nil || got != "sha256:"+hex.EncodeToString(want[:]) {
		t.Errorf("DigestFile = %s, %v", got, err)
	}
	if _, err := m.DigestFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := m.DigestFile(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("directory: %v", err)
	}
	if _, err := m.DigestTree(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing tree: %v", err)
	}
}

// TestDigestCache checks that cached digests follow changes to a file: the key
// (dev, inode, size, mtime, ctime) moves with every write, and a file changed
// too recently to trust its timestamps is never cached.
func TestDigestCache(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	digest := func(s string) string { h := sha256.Sum256([]byte(s)); return "sha256:" + hex.EncodeToString(h[:]) }
	cached := func(m *Measurer) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, ok := m.files[p]
		return ok
	}

	// A file written just now is racy: not cached (the one-second window:
	// no stamp tick known).
	m := NewMeasurer(nil)
	m.stampTick = nil
	mkfile(t, p, "one", 0o644)
	if got, _ := m.DigestFile(p); got != digest("one") {
		t.Fatalf("got %s", got)
	}
	if cached(m) {
		t.Error("racily new file was cached")
	}

	// With the clock an hour ahead the file is old enough to cache.
	m.now = func() time.Time { return time.Now().Add(time.Hour) }
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.DigestFile(p); got != digest("one") || !cached(m) {
		t.Fatalf("got %s, cached %v", got, cached(m))
	}
	// A same-size rewrite changes mtime and ctime, so the key misses.
	if err := os.WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.DigestFile(p); got != digest("two") {
		t.Errorf("after rewrite: %s, want digest of two", got)
	}
	// Replacing the file by rename changes the inode.
	tmp := filepath.Join(dir, "g")
	mkfile(t, tmp, "six", 0o644)
	if err := os.Chtimes(tmp, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	if got, _ := m.DigestFile(p); got != digest("six") {
		t.Errorf("after rename: %s, want digest of six", got)
	}
	// A tree sees the same changes through the shared cache.
	d1, err := m.DigestTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("ten"), 0o644); err != nil {
		t.Fatal(err)
	}
	d2, err := m.DigestTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if d1 == d2 {
		t.Error("tree digest unchanged after a same-size rewrite")
	}
}

func TestDigestTreeManyFilesMatchesFresh(t *testing.T) {
	// Parallel hashing of misses must give what a fresh, cold measurer gives.
	root := t.TempDir()
	for i := range 200 {
		mkfile(t, filepath.Join(root, fmt.Sprintf("d%d", i%7), fmt.Sprintf("f%03d", i)), strings.Repeat("z", i), 0o644)
	}
	warm := NewMeasurer(nil)
	warm.now = func() time.Time { return time.Now().Add(time.Hour) }
	a, err := warm.DigestTree(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := warm.DigestTree(root)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewMeasurer(nil).DigestTree(root)
	if err != nil {
		t.Fatal(err)
	}
	if a != b || a != c {
		t.Errorf("cold %s, warm %s, fresh %s", a, b, c)
	}
}

// TestRacyWindowFollowsTheStampTick: where the tick of the clock that
// stamps change times is known, a file is cached once its change time is
// two ticks older than the start of hashing, and not before; the digest
// of the same version then serves DigestOpen (a running executable)
// without a read, and a same-size rewrite misses both caches. A change
// time in whole seconds keeps the one-second window.
func TestRacyWindowFollowsTheStampTick(t *testing.T) {
	const tick = 10 * time.Millisecond
	p := filepath.Join(t.TempDir(), "bin")
	mkfile(t, p, "one", 0o755)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	key, ok := statKey(fi)
	if !ok {
		t.Skip("no stat key on this system")
	}
	if key.ctime%int64(time.Second) == 0 {
		t.Skip("this file system keeps whole seconds")
	}
	changed := time.Unix(0, max(key.ctime, key.mtime))
	m := NewMeasurer(nil)
	m.stampTick = func(*os.File) (time.Duration, bool) { return tick, true }
	cached := func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		_, inFiles := m.files[p]
		_, inOpened := m.opened[key]
		return inFiles && inOpened
	}
	m.now = func() time.Time { return changed.Add(tick + tick/2) } // within two ticks
	if _, err := m.DigestFile(p); err != nil {
		t.Fatal(err)
	}
	if cached() {
		t.Fatal("cached a file changed 1.5 ticks before hashing")
	}
	m.now = func() time.Time { return changed.Add(2*tick + time.Millisecond) }
	want, err := m.DigestFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !cached() {
		t.Fatal("a file changed more than two ticks before hashing was not cached")
	}
	// The kernel's view of a process running it: served from the cache.
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m.now = func() time.Time { t.Error("DigestOpen hashed a file just digested"); return time.Now() }
	if got, err := m.DigestOpen(f); err != nil || got != want {
		t.Fatalf("DigestOpen = %s, %v; want %s from the cache", got, err, want)
	}
	m.now = time.Now
	// Rewritten until its change time moves (the hashing clock above was
	// set ahead: a rewrite in the same tick is the racy case itself).
	for {
		if err := os.WriteFile(p, []byte("two"), 0o755); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if k, _ := statKey(fi); k != key {
			break
		}
	}
	two := func() string { h := sha256.Sum256([]byte("two")); return "sha256:" + hex.EncodeToString(h[:]) }()
	if got, _ := m.DigestFile(p); got != two {
		t.Errorf("after a same-size rewrite DigestFile = %s, want %s", got, two)
	}
	if got, _ := m.DigestOpen(f); got != two {
		t.Errorf("after a same-size rewrite DigestOpen = %s, want %s", got, two)
	}
	// Whole seconds: the file system's tick is not trusted.
	if w := m.racyWindowOf(f, fileKey{dev: key.dev, ctime: 1_700_000_000 * int64(time.Second)}); w != racyWindow {
		t.Errorf("racy window of a whole-second change time = %s, want %s", w, racyWindow)
	}
}
