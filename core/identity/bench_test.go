package identity

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDigestTree digests a generated tree of 10,000 files in 100
// directories with a warm cache: one lstat per entry, no file read. Target:
// under 50 ms/op.
func BenchmarkDigestTree(b *testing.B) {
	root := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("pkg%03d", d), "lib")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			content := fmt.Sprintf("module.exports = %d; // %s\n", d*100+f, dir)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.js", f)), []byte(content), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	m := NewMeasurer(nil)
	m.now = func() time.Time { return time.Now().Add(time.Hour) } // files count as settled
	want, err := m.DigestTree(root)
	if err != nil {
		b.Fatal(err)
	}
	if n := len(m.files); n != 10_000 {
		b.Fatalf("cache holds %d files, want 10000", n)
	}
	b.Run("whole", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			got, err := m.DigestTree(root)
			if err != nil || got != want {
				b.Fatalf("DigestTree = %s, %v; want %s", got, err, want)
			}
		}
		cpu.report(b)
	})
	// The same tree with data left out: the default ignores and a
	// .gitignore matched against every entry (none of them data).
	b.Run("data", func(b *testing.B) {
		if err := os.WriteFile(filepath.Join(root, ".gitignore"), []byte("*.db\nstate/\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		if _, err := m.DigestTreeData(root, []string{"uploads/**"}, nil); err != nil {
			b.Fatal(err)
		}
		cpu := startCPU()
		for b.Loop() {
			if _, err := m.DigestTreeData(root, []string{"uploads/**"}, nil); err != nil {
				b.Fatal(err)
			}
		}
		cpu.report(b)
	})
}

// BenchmarkDigestFile hashes a 64 MiB file without the cache; read MB/s as
// hashing throughput (page cache warm).
func BenchmarkDigestFile(b *testing.B) {
	const size = 64 << 20
	p := filepath.Join(b.TempDir(), "big")
	buf := make([]byte, size)
	rand.Read(buf)
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		if _, err := NewMeasurer(nil).DigestFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDigestPackage re-checks a package of 10,000 files (100
// dependencies of 100 files in node_modules) with a warm cache: the check
// that runs when a watched package changes. Target: under 50 ms/op.
func BenchmarkDigestPackage(b *testing.B) {
	root := b.TempDir()
	if err := os.WriteFile(filepath.Join(root, "package.json"), []byte(`{"name":"bench"}`), 0o644); err != nil {
		b.Fatal(err)
	}
	for d := range 100 {
		dir := filepath.Join(root, "node_modules", fmt.Sprintf("dep%03d", d), "lib")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.js", f)), []byte(fmt.Sprintf("module.exports = %d\n", f)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	m := NewMeasurer(nil)
	m.now = func() time.Time { return time.Now().Add(time.Hour) } // files count as settled
	want, err := m.DigestPackage(root)
	if err != nil || want.Files != 10_001 {
		b.Fatalf("DigestPackage = %+v, %v; want 10001 files", want, err)
	}
	cpu := startCPU()
	for b.Loop() {
		got, err := m.DigestPackage(root)
		if err != nil || got.SHA256 != want.SHA256 {
			b.Fatalf("DigestPackage = %s, %v; want %s", got.SHA256, err, want.SHA256)
		}
	}
	cpu.report(b)
}
