package identity

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// Data is not code (docs/DESIGN.md, "Execution identity"): files a server
// writes at run time in a measured tree (a ledger, a log, a sqlite
// journal) are no new code, and a change to them starts no build. What is
// data is what the ecosystem marks so: the tree's .gitignore files (nested,
// with gitignore's semantics), the usual ignores of file watchers
// ([DefaultIgnores]) and the patterns a person configures for a server.
// Both the server and the agent can write a .gitignore, so an ignore
// pattern only ever leaves out a file that is not code (see isCode): a
// source file by extension, an executable file, a file starting with "#!",
// a project or lock file, a .gitignore, or a file the record measures by
// name (executable, entry, interpreter, wrappers, lockfile) is measured
// whatever a pattern says.

// DefaultIgnores are the ignore patterns (gitignore syntax) applied to every
// measured tree beside its .gitignore files: version control metadata
// (which the build watcher never watches either), caches, logs, compiled
// Python, editors' swap and backup files, sqlite's journals.
var DefaultIgnores = []string{
	".git/", "**/node_modules/.cache/", "*.log", "__pycache__/", "*.pyc", "*.pyo",
	".DS_Store", "*.swp", "*.swo", "*.swx", "*~", ".#*", "#*#", "4913",
	"*-journal", "*-wal", "*-shm",
}

// ignoreFile is the name of the files whose patterns a tree's directories
// carry.
const ignoreFile = ".gitignore"

// ignoreRules tell data from code under one measured tree.
type ignoreRules struct {
	base []gitignore.Pattern // DefaultIgnores and the configured patterns, relative to the root
	code map[string]bool     // absolute paths measured by name: never data
}

// newIgnoreRules returns the rules of a tree with the configured patterns
// (relative to the tree's root) and the files that are code whatever a
// pattern says (absolute, symlinks resolved).
func newIgnoreRules(patterns []string, code []string) *ignoreRules {
	r := &ignoreRules{code: make(map[string]bool, len(code))}
	for _, p := range slices.Concat(DefaultIgnores, patterns) {
		if p = strings.TrimSpace(p); p != "" {
			r.base = append(r.base, gitignore.ParsePattern(p, nil))
		}
	}
	for _, c := range code {
		if c != "" {
			r.code[c] = true
		}
	}
	return r
}

// parseIgnore reads the patterns of a .gitignore file in the directory
// whose path (relative to the tree's root, split) is domain: comments and
// blank lines left out, as git does.
func parseIgnore(r io.Reader, domain []string) []gitignore.Pattern {
	var out []gitignore.Pattern
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
			continue
		}
		out = append(out, gitignore.ParsePattern(line, domain))
	}
	return out
}

// readIgnoreFile returns the patterns of dir's .gitignore (none when there
// is none or it cannot be read: a pattern only ever leaves out data, so a
// missing one measures more, never less).
func readIgnoreFile(dir string, domain []string) []gitignore.Pattern {
	// Without blocking: a FIFO put in its place must not stall the walk.
	f, err := os.OpenFile(filepath.Join(dir, ignoreFile), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	return parseIgnore(io.LimitReader(f, 1<<20), domain)
}

// splitRel splits a slash-separated relative path into its names.
func splitRel(rel string) []string {
	if rel == "" || rel == "." {
		return nil
	}
	return strings.Split(filepath.ToSlash(rel), "/")
}

// matches reports whether the path (split) is ignored by patterns, the
// last matching pattern deciding (gitignore's order: the root's first,
// deeper directories' later).
func matches(patterns []gitignore.Pattern, path []string, isDir bool) bool {
	// gitignore.Matcher's loop, without allocating a matcher per entry.
	for i := len(patterns) - 1; i >= 0; i-- {
		if m := patterns[i].Match(path, isDir); m != gitignore.NoMatch {
			return m == gitignore.Exclude
		}
	}
	return false
}

// codeByName reports whether a file is code by its name or because the
// record measures it: a source extension (sourceExts), a project file or
// lockfile, a .gitignore, or one of the record's own files.
func (r *ignoreRules) codeByName(abs string) bool {
	name := filepath.Base(abs)
	return r.code[abs] || name == ignoreFile || sourceExts[filepath.Ext(name)] ||
		slices.Contains(PackageFiles, name) || slices.Contains(LockfileNames, name)
}

// isCode reports whether an entry of kind with mode bits is code, which no
// ignore pattern may leave out: anything but a regular file (a symlink is
// measured by its target text), a file code by name, an executable file
// (any execute bit), or a file starting with "#!". A file that cannot be
// read counts as code (measuring it then fails with the reason).
func (r *ignoreRules) isCode(abs string, kind byte, mode os.FileMode) bool {
	if kind != kindFile || r.codeByName(abs) || mode&0o111 != 0 {
		return true
	}
	return startsWithShebang(abs)
}

// startsWithShebang reports whether the file at p starts with "#!", or
// cannot be read or is no regular file now. It opens without blocking, so
// that a file replaced by a FIFO in the meantime cannot stall the walk or
// the build watcher.
func startsWithShebang(p string) bool {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return true
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return true
	}
	var head [2]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && n < 2 {
		return err != io.EOF && err != io.ErrUnexpectedEOF
	}
	return bytes.Equal(head[:], []byte("#!"))
}

// DataFilter tells, for a change seen in a tree that a record measures
// (its entry's package, its watched directories), whether the change is
// data: whether it cannot change the record, so that no build needs to be
// checked for it (package watch closes the gate at the first change that
// is not data). It applies the rules of the measurement itself: in a
// package, only the files [Measurer.DigestPackage] lists are measured; in
// a watched directory, every file but the data its ignore patterns mark
// (see [Measurer.DigestTreeData]). A change at a tree's root, outside the
// record's trees, to code, to a .gitignore, or to a directory that is not
// both ignored and empty, is not data.
type DataFilter struct {
	trees []dataTree
}

type dataTree struct {
	roots []string // the root as written and with symlinks resolved
	pkg   bool     // a package (packageRules), else a watched tree (ignore rules)
	rules *ignoreRules
}

// NewDataFilter returns the filter of rec's measured trees; ExtraDigests
// keys that are relative are taken against rec.WorkingDirectory.
func NewDataFilter(rec Record) *DataFilter {
	code := []string{rec.ResolvedExecutable.Path, rec.Entry, rec.Lockfile}
	if rec.Interpreter != nil {
		code = append(code, rec.Interpreter.Path)
	}
	for _, w := range rec.Wrappers {
		code = append(code, w.Path)
	}
	rules := newIgnoreRules(rec.Ignore, code)
	f := &DataFilter{}
	add := func(p string, pkg bool) {
		roots := []string{filepath.Clean(p)}
		if real, err := filepath.EvalSymlinks(p); err == nil && real != roots[0] {
			roots = append(roots, real)
		}
		f.trees = append(f.trees, dataTree{roots: roots, pkg: pkg, rules: rules})
	}
	if rec.Package != nil && rec.Package.Dir != "" {
		add(rec.Package.Dir, true)
	}
	for _, k := range slices.Sorted(maps.Keys(rec.ExtraDigests)) {
		p := k
		if !filepath.IsAbs(p) {
			p = filepath.Join(rec.WorkingDirectory, p)
		}
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			add(p, false)
		}
	}
	return f
}

// IsData reports whether a change at path (absolute) is data for every
// measured tree that holds it; false when no tree holds it.
func (f *DataFilter) IsData(path string) bool {
	if f == nil {
		return false
	}
	path = filepath.Clean(path)
	held := false
	for _, t := range f.trees {
		for _, root := range t.roots {
			if !strings.HasPrefix(path, root+string(filepath.Separator)) {
				continue
			}
			held = true
			if !t.isData(path, root) {
				return false
			}
		}
	}
	return held
}

// isData is IsData for one tree, path strictly inside root.
func (t dataTree) isData(path, root string) bool {
	parts := splitRel(path[len(root)+1:])
	if t.pkg && slices.ContainsFunc(parts[:len(parts)-1], func(d string) bool { return skippedDirs[d] }) {
		return true // caches a package walk never enters
	}
	fi, err := os.Lstat(path)
	exists := err == nil
	if exists && fi.IsDir() {
		// A directory moved in with files in it brings code no event
		// names: only an empty one is data.
		if !emptyDir(path) {
			return false
		}
		if t.pkg {
			return true // packages list files, not directories
		}
		return matches(t.patternsFor(root, parts), parts, true)
	}
	if !exists && filepath.Ext(path) == "" {
		// Gone, and perhaps a directory moved away with code in it,
		// which no other event names.
		return false
	}
	if t.pkg {
		return !packageLists(parts, exists && fi.Mode()&os.ModeSymlink != 0)
	}
	if !matches(t.patternsFor(root, parts), parts, false) {
		return false
	}
	if !exists {
		// Gone: code by its name only (a removed file runs no more).
		return !t.rules.codeByName(path)
	}
	var kind byte = kindFile
	if !fi.Mode().IsRegular() {
		kind = kindOther
	}
	return !t.rules.isCode(path, kind, fi.Mode())
}

// patternsFor returns the ignore patterns in force for the entry parts of
// root: the base rules, then each .gitignore from the root down to the
// entry's directory, read now.
func (t dataTree) patternsFor(root string, parts []string) []gitignore.Pattern {
	ps := slices.Clone(t.rules.base)
	dir := root
	for i := 0; i < len(parts); i++ {
		ps = append(ps, readIgnoreFile(dir, parts[:i])...)
		if i < len(parts)-1 {
			dir = filepath.Join(dir, parts[i])
		}
	}
	return ps
}

// packageLists reports whether DigestPackage lists the entry parts of a
// package (packageRules): nothing under a skipped directory; every file of
// a dependency tree; elsewhere symlinks, source files, project files and
// lockfiles.
func packageLists(parts []string, symlink bool) bool {
	var flags uint8
	for _, d := range parts[:len(parts)-1] {
		if skippedDirs[d] {
			return false
		}
		flags |= dependencyDirs[d]
	}
	name := parts[len(parts)-1]
	if symlink {
		return true
	}
	return packageRules.file(flags, name, kindFile)
}

// emptyDir reports whether directory p has no entries (false when it
// cannot be read).
func emptyDir(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	return len(names) == 0 && err == io.EOF
}
