// Package codediff shows a person what changed in a server's source tree
// since the code they last approved: the files added, removed and changed,
// with added and removed lines, and the unified diff of each text file.
//
// A measured identity says that the code changed (digests); this package
// says how, so that approving a rebuild is a review and not a ritual. It
// keeps its own copy of the tree's text files (a Snapshot, bounded) rather
// than asking git: a server writes in its own tree, and git runs what a
// repository's configuration names (core.fsmonitor, filters) — the daemon
// never runs code the server could have written. What is shown is what
// the snapshots hold: a file beyond the bounds is summarised (its digest
// changed or not), never guessed.
package codediff

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
	"github.com/portcullis/portcullis/core/ids"
)

// Limits bound a snapshot: the files kept, each file's text, the whole.
type Limits struct {
	MaxFiles      int   // files recorded (digest and, for text, the text)
	MaxFileBytes  int64 // a file larger is recorded by digest only
	MaxTotalBytes int64 // text kept in all; later files by digest only
	// MaxReadBytes bounds the bytes read in all: a file that would pass
	// it is recorded by size only, never read (a sparse file of a
	// terabyte costs its writer nothing); 0 is DefaultLimits' value.
	MaxReadBytes int64
	// MaxEntries bounds the directory entries visited, of every kind; the
	// walk stops there (Snapshot.Incomplete). 0 is DefaultLimits' value.
	MaxEntries int
}

// DefaultLimits keep a source tree of a local server whole: 4000 files,
// 256 KiB each, 16 MiB of text in all; at most 256 MiB read (what is past
// it is recorded by size) and 200,000 entries walked.
var DefaultLimits = Limits{MaxFiles: 4000, MaxFileBytes: 256 << 10, MaxTotalBytes: 16 << 20,
	MaxReadBytes: 256 << 20, MaxEntries: 200_000}

// File is one regular file of a snapshot.
type File struct {
	// Digest is the SHA-256 of the content, hex; empty for a file past
	// Limits.MaxReadBytes, which cannot be compared.
	Digest string `json:"digest"`
	Size   int64  `json:"size"`             // bytes
	Text   string `json:"text,omitempty"`   // the content, for a text file within the limits
	Binary bool   `json:"binary,omitempty"` // not text: compared by digest, no lines shown
	// Kept is false for a text file whose content the limits left out:
	// only its digest can be compared.
	Kept bool `json:"kept,omitempty"`
}

// Snapshot is a source tree's files as one epoch's launch found them.
type Snapshot struct {
	Root    string          `json:"root"`            // the tree's path (SourceRoot)
	Epoch   ids.EpochID     `json:"epoch,omitempty"` // the epoch whose launch it was taken at
	TakenAt time.Time       `json:"takenAt"`
	Files   map[string]File `json:"files"` // slash-separated path below Root → file
	// Omitted counts the files not recorded at all: past Limits.MaxFiles,
	// or unreadable (a directory or file the daemon may not open).
	Omitted int `json:"omitted,omitempty"`
	// Incomplete says why the walk stopped early (Limits.MaxEntries):
	// files past it are neither recorded nor counted.
	Incomplete string `json:"incomplete,omitempty"`
	// Identity is the epoch's measured identity digest, and Measured the
	// digests its launch measured of files below Root (slash path →
	// "sha256:…"): what the snapshot must agree with (see Check).
	Identity string            `json:"identity,omitempty"`
	Measured map[string]string `json:"measured,omitempty"`
}

// Ignores are the patterns (gitignore syntax) left out of every snapshot
// beside the tree's own .gitignore files: version control metadata,
// dependencies and build caches, which are not the source a person edits.
var Ignores = []string{
	".git/", ".hg/", ".svn/", "node_modules/", "__pycache__/", "*.pyc", ".venv/", "venv/",
	".mypy_cache/", ".pytest_cache/", ".ruff_cache/", ".cache/", "target/", ".DS_Store",
	"*.swp", "*~", "*.log",
}

// Take records the tree at root: every regular file not ignored (the
// tree's .gitignore files, nested, and Ignores), within lim, and the files
// named by always (slash paths below root) even where ignored: the files a
// launch measured are never left out by patterns the server can write.
// Symbolic links are not followed; a file that is not regular (a FIFO, a
// socket, a device) is left out without being opened for long.
func Take(root string, lim Limits, always ...string) (*Snapshot, error) {
	root = filepath.Clean(root)
	fi, err := os.Lstat(root)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", root)
	}
	s := &Snapshot{Root: root, TakenAt: time.Now().UTC(), Files: map[string]File{}}
	var base []gitignore.Pattern
	for _, p := range Ignores {
		base = append(base, gitignore.ParsePattern(p, nil))
	}
	if lim.MaxReadBytes == 0 {
		lim.MaxReadBytes = DefaultLimits.MaxReadBytes
	}
	if lim.MaxEntries == 0 {
		lim.MaxEntries = DefaultLimits.MaxEntries
	}
	t := taker{s: s, lim: lim}
	t.dir(root, nil, base)
	for _, rel := range always {
		if _, ok := s.Files[rel]; !ok && rel != "" && filepath.IsLocal(filepath.FromSlash(rel)) {
			t.file(filepath.Join(root, filepath.FromSlash(rel)), rel)
		}
	}
	return s, t.err
}

type taker struct {
	s       *Snapshot
	lim     Limits
	total   int64 // text kept
	read    int64 // bytes read
	entries int
	err     error // the first error that is not a vanished or unreadable file
}

func (t *taker) dir(abs string, rel []string, patterns []gitignore.Pattern) {
	if b, err := readSmall(filepath.Join(abs, ".gitignore"), 64<<10); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), " \t\r")
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			patterns = append(patterns, gitignore.ParsePattern(line, slices.Clone(rel)))
		}
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		if len(rel) == 0 {
			t.err = err
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.s.Omitted++ // its files, if any, are not seen
		}
		return
	}
	m := gitignore.NewMatcher(patterns)
	for _, e := range entries {
		if t.s.Incomplete != "" {
			return
		}
		if t.entries++; t.entries > t.lim.MaxEntries {
			t.s.Incomplete = fmt.Sprintf("the walk stopped after %d entries", t.lim.MaxEntries)
			return
		}
		path := append(slices.Clone(rel), e.Name())
		typ := e.Type()
		switch {
		case typ.IsDir():
			if !m.Match(path, true) {
				t.dir(filepath.Join(abs, e.Name()), path, patterns)
			}
		case typ.IsRegular():
			if !m.Match(path, false) {
				t.file(filepath.Join(abs, e.Name()), strings.Join(path, "/"))
			}
		}
	}
}

func (t *taker) file(abs, rel string) {
	if len(t.s.Files) >= t.lim.MaxFiles {
		t.s.Omitted++
		return
	}
	f, err := os.OpenFile(abs, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			t.s.Omitted++ // unreadable: counted, so a change in it is never claimed absent
		}
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return
	}
	if t.read+fi.Size() > t.lim.MaxReadBytes {
		t.s.Files[rel] = File{Size: fi.Size()} // not read: no digest to compare
		return
	}
	t.read += fi.Size()
	h := sha256.New()
	keep := fi.Size() <= t.lim.MaxFileBytes && t.total+fi.Size() <= t.lim.MaxTotalBytes
	var buf bytes.Buffer
	var w io.Writer = h
	head := headBuf{max: 8 << 10} // a file not kept is told binary or text by its start, as git does
	if keep {
		w = io.MultiWriter(h, &buf)
	} else {
		w = io.MultiWriter(h, &head)
	}
	// At most the size Stat gave: a file the server keeps growing while it
	// is read costs no more than its size when opened.
	n, err := io.Copy(w, io.LimitReader(f, fi.Size()))
	if err != nil {
		t.s.Omitted++
		return
	}
	out := File{Digest: hex.EncodeToString(h.Sum(nil)), Size: n}
	if keep && int64(buf.Len()) == n {
		b := buf.Bytes()
		if isText(b) {
			out.Text, out.Kept = string(b), true
			t.total += n
		} else {
			out.Binary = true
		}
	} else if !keep && bytes.IndexByte(head.b, 0) >= 0 {
		out.Binary = true
	}
	t.s.Files[rel] = out
}

// headBuf keeps the first max bytes written to it.
type headBuf struct {
	b   []byte
	max int
}

func (h *headBuf) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// isText: valid UTF-8 with no NUL, as git and diff tools decide.
func isText(b []byte) bool {
	return bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
}

// readSmall reads a regular file of at most max bytes, symlinks not followed.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// SourceRoot is the tree a server's code is edited in, for the files the
// launch measured: the work tree of the git repository holding the first
// of paths that lies in one (its top, found by a .git entry), else the
// first path that is a directory. A work tree at home or at / itself is
// too wide to stand for one server: the directory of the path is used
// instead. ok is false when none of paths names a tree.
func SourceRoot(home string, paths ...string) (root string, ok bool) {
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		dir := p
		if fi, err := os.Stat(p); err != nil {
			continue
		} else if !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		if top, found := gitTop(dir); found && !tooWide(top, home) {
			return top, true
		}
	}
	for _, p := range paths {
		if p == "" || !filepath.IsAbs(p) {
			continue
		}
		dir := p
		if fi, err := os.Stat(p); err != nil {
			continue
		} else if !fi.IsDir() {
			dir = filepath.Dir(p)
		}
		if !tooWide(dir, home) && !systemDir(dir) {
			return dir, true
		}
	}
	return "", false
}

// gitTop is the directory at or above dir holding a .git entry.
func gitTop(dir string) (string, bool) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, ".git")); err == nil {
			return d, true
		}
		if d == filepath.Dir(d) {
			return "", false
		}
	}
}

func tooWide(dir, home string) bool {
	dir = filepath.Clean(dir)
	return dir == "/" || (home != "" && dir == filepath.Clean(home))
}

// systemDir: a directory of installed software, not a source tree.
func systemDir(dir string) bool {
	for _, p := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/opt", "/nix", "/System", "/Library", "/Applications"} {
		if dir == p || strings.HasPrefix(dir, p+"/") {
			return true
		}
	}
	return false
}
