package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PackageFiles are the project files that mark a package: walking up from
// an entry script, the nearest directory holding one is the entry's
// package.
var PackageFiles = []string{"package.json", "pyproject.toml", "go.mod", "Cargo.toml", "deno.json", "setup.py", "setup.cfg"}

// dependencyDirs are the resolved dependency trees inside a package, taken
// whole (every file): what the entry imports at run time.
var dependencyDirs = map[string]bool{"node_modules": true, "site-packages": true}

// skippedDirs hold caches and metadata that a run writes, no code.
var skippedDirs = map[string]bool{".git": true, ".hg": true, ".svn": true, "__pycache__": true,
	".pytest_cache": true, ".mypy_cache": true, ".ruff_cache": true, ".cache": true}

// sourceExts are the files of a package outside its dependency trees that
// are code or decide what code runs; data a server writes next to its
// sources (a database, a log) is left out, so that it starts no new epoch.
var sourceExts = map[string]bool{".js": true, ".mjs": true, ".cjs": true, ".ts": true, ".mts": true, ".cts": true,
	".jsx": true, ".tsx": true, ".json": true, ".py": true, ".pth": true, ".so": true, ".node": true, ".wasm": true,
	".go": true, ".rs": true, ".toml": true, ".lock": true, ".yaml": true, ".yml": true, ".cfg": true, ".sh": true, ".rb": true, ".lua": true}

// maxChanged bounds the files a PackageDigest lists as changed.
const maxChanged = 20

// PackageDigest is the measured package of an entry script (when the
// person named no watch path): Dir its directory, SHA256 the digest of its
// sources and dependency trees, Measured a short description for people
// ("sources, node_modules"), Files how many files it covers, and Changed
// the files (relative to Dir, at most 20) that differ from the previous
// measurement of Dir with another digest by the same Measurer.
type PackageDigest struct {
	Dir      string   `json:"dir"`
	SHA256   string   `json:"sha256"`
	Measured string   `json:"measured"`
	Files    int      `json:"files"`
	Changed  []string `json:"changed,omitempty"`
}

// packageDir returns the package of entry: the nearest directory above it
// holding one of PackageFiles, below the home directory; else the entry's
// own directory, unless that is the home directory, the root or a system
// directory (then "").
func packageDir(entry string) string {
	home, _ := os.UserHomeDir()
	start := filepath.Dir(entry)
	for dir := start; ; {
		if dir == home || dir == "/" {
			break
		}
		for _, f := range PackageFiles {
			if fi, err := os.Stat(filepath.Join(dir, f)); err == nil && fi.Mode().IsRegular() {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	if start == home || start == "/" || systemDir(start) {
		return ""
	}
	return start
}

func systemDir(d string) bool {
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/opt/homebrew", "/System", "/Library", "/nix", "/etc"} {
		if d == p || strings.HasPrefix(d, p+"/") {
			return true
		}
	}
	return false
}

// DigestPackage digests the package at dir: every file of its dependency
// trees (node_modules, site-packages) and its source files (by extension,
// see sourceExts) elsewhere, caches and VCS metadata left out; files come
// from the (device, inode, size, mtime, ctime) cache, so a warm re-check
// costs one lstat per entry.
func (m *Measurer) DigestPackage(dir string) (PackageDigest, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return PackageDigest{}, fmt.Errorf("digesting package %s: %w", dir, err)
	}
	var items []treeItem
	deps := map[string]bool{}
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == real {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p[len(real):], string(filepath.Separator)))
		inDeps := false
		for _, part := range strings.Split(rel, "/") {
			if dependencyDirs[part] {
				inDeps = true
				deps[part] = true
				break
			}
		}
		if d.IsDir() {
			if skippedDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		t := d.Type()
		switch {
		case t.IsRegular():
			if !inDeps && !sourceExts[filepath.Ext(d.Name())] && !slices.Contains(PackageFiles, d.Name()) && !slices.Contains(LockfileNames, d.Name()) {
				return nil
			}
			items = append(items, treeItem{kind: kindFile, rel: rel, abs: p})
		case t&fs.ModeSymlink != 0:
			items = append(items, treeItem{kind: kindSymlink, rel: rel, abs: p})
		}
		return nil
	})
	if err != nil {
		return PackageDigest{}, fmt.Errorf("digesting package %s: %w", dir, err)
	}
	if err := m.fillItems(items); err != nil {
		return PackageDigest{}, fmt.Errorf("digesting package %s: %w", dir, err)
	}
	h := sha256.New()
	var buf []byte
	for i := range items {
		it := &items[i]
		buf = buf[:0]
		buf = append(buf, it.kind)
		buf = binary.BigEndian.AppendUint32(buf, uint32(it.mode))
		buf = binary.AppendUvarint(buf, uint64(len(it.rel)))
		buf = append(buf, it.rel...)
		var sum [sha256.Size]byte
		if it.kind == kindFile {
			sum = it.sum
		} else {
			sum = sha256.Sum256([]byte(it.target))
		}
		buf = append(buf, sum[:]...)
		h.Write(buf)
		if it.kind != kindFile {
			it.sum = sum
		}
	}
	pd := PackageDigest{Dir: real, SHA256: DigestPrefix + hex.EncodeToString(h.Sum(nil)), Files: len(items)}
	parts := []string{"sources"}
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for k := range deps {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, d)
	}
	pd.Measured = strings.Join(parts, ", ")
	pd.Changed = m.rememberListing(real, pd.SHA256, items)
	return pd, nil
}

// listings are the last two listings of a package with distinct digests,
// and the files that differ between them.
type listings struct {
	cur, prev         string
	curList, prevList map[string][sha256.Size]byte
	changed           []string
}

// rememberListing keeps items as dir's current listing when digest is new,
// and returns the files that differ from the previous distinct one (sorted,
// at most maxChanged). An unchanged digest costs no listing.
func (m *Measurer) rememberListing(dir, digest string, items []treeItem) []string {
	m.mu.Lock()
	l := m.packages[dir]
	if l != nil && l.cur == digest {
		changed := slices.Clone(l.changed)
		m.mu.Unlock()
		return changed
	}
	m.mu.Unlock()
	listing := make(map[string][sha256.Size]byte, len(items))
	for i := range items {
		listing[items[i].rel] = items[i].sum
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l = m.packages[dir]; l == nil {
		l = &listings{}
		m.packages[dir] = l
	}
	l.prev, l.prevList = l.cur, l.curList
	l.cur, l.curList = digest, listing
	l.changed = nil
	if l.prevList != nil {
		for k, v := range l.curList {
			if o, ok := l.prevList[k]; !ok || o != v {
				l.changed = append(l.changed, k)
			}
		}
		for k := range l.prevList {
			if _, ok := l.curList[k]; !ok {
				l.changed = append(l.changed, k)
			}
		}
		slices.Sort(l.changed)
		if len(l.changed) > maxChanged {
			l.changed = l.changed[:maxChanged]
		}
	}
	return slices.Clone(l.changed)
}
