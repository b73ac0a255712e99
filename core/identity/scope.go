package identity

import (
	"crypto/sha256"
	"fmt"
	"maps"
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
// whole (every file): what the entry imports at run time. Each has a walk
// flag of its own (see packageRules).
var dependencyDirs = map[string]uint8{"node_modules": 1 << 0, "site-packages": 1 << 1}

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

// packageRules list a package's files: every file and symlink of its
// dependency trees, and elsewhere its source files, project files and
// lockfiles (and symlinks); caches and VCS metadata are not entered.
var packageRules = walkRules{
	dir: func(parent uint8, name string) (uint8, bool, bool) {
		parent |= dependencyDirs[name]
		return parent, false, !skippedDirs[name]
	},
	file: func(flags uint8, name string, kind byte) bool {
		switch kind {
		case kindFile:
			return flags != 0 || sourceExts[filepath.Ext(name)] ||
				slices.Contains(PackageFiles, name) || slices.Contains(LockfileNames, name)
		case kindSymlink:
			return true
		}
		return false
	},
}

// DigestPackage digests the package at dir: every file of its dependency
// trees (node_modules, site-packages) and its source files (by extension,
// see sourceExts) elsewhere, caches and VCS metadata left out, with the
// encoding of [Measurer.DigestTree] over the files and symlinks listed
// (directories are not part of it). Files come from the (device, inode,
// size, mtime, ctime) cache, so a warm re-check costs one stat per file
// and reads none.
func (m *Measurer) DigestPackage(dir string) (PackageDigest, error) {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return PackageDigest{}, fmt.Errorf("digesting package %s: %w", dir, err)
	}
	items, err := m.walkTree(real, packageRules)
	if err != nil {
		return PackageDigest{}, fmt.Errorf("digesting package %s: %w", dir, err)
	}
	pd := PackageDigest{Dir: real, SHA256: digestItems(items), Files: len(items)}
	var in uint8
	for i := range items {
		in |= items[i].flags
	}
	parts := []string{"sources"}
	for _, name := range slices.Sorted(maps.Keys(dependencyDirs)) {
		if in&dependencyDirs[name] != 0 {
			parts = append(parts, name)
		}
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
		sum := items[i].sum
		if items[i].kind == kindSymlink {
			sum = sha256.Sum256([]byte(items[i].target))
		}
		listing[items[i].rel] = sum
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
