package identity

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
// measured tree beside its .gitignore files: caches, logs, compiled Python,
// editors' swap and backup files, sqlite's journals.
var DefaultIgnores = []string{
	"**/node_modules/.cache/", "*.log", "__pycache__/", "*.pyc", "*.pyo",
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
	f, err := os.Open(filepath.Join(dir, ignoreFile))
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
	return gitignore.NewMatcher(patterns).Match(path, isDir)
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
// cannot be read.
func startsWithShebang(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return true
	}
	defer f.Close()
	var head [2]byte
	n, err := io.ReadFull(f, head[:])
	if err != nil && n < 2 {
		return err != io.EOF && err != io.ErrUnexpectedEOF
	}
	return bytes.Equal(head[:], []byte("#!"))
}
