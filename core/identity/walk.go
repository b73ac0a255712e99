package identity

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing/format/gitignore"
)

// The walk that [Measurer.DigestTree] and [Measurer.DigestPackage] share.
// Each directory is opened once: its entries come from the directory
// listing (names and types), and each entry that is measured is stat'ed
// relative to the open directory (fstatat, one path component for the
// kernel to resolve) on up to walkWorkers goroutines, one directory at a
// time each. A file whose (device, inode, size, mtime, ctime) matches the
// cache is not read; the others are hashed afterwards, in parallel. The
// entries come out in the order of filepath.WalkDir (depth first, names
// sorted within a directory), which the tree digests are defined over.

// walkRules says which entries a walk lists. Flags are what a directory
// passes on to its entries (for a package: "inside a dependency tree").
type walkRules struct {
	// root lists the root itself, as ".".
	root bool
	// dir decides for a directory below the root, given its parent's
	// flags, whether it is listed, whether it is entered, and the flags of
	// its entries. Nil lists and enters every directory.
	dir func(parent uint8, name string) (flags uint8, list, enter bool)
	// file decides whether a non-directory entry (kind from the listing)
	// is listed. Nil lists every one.
	file func(flags uint8, name string, kind byte) bool
	// ignore, when set, leaves data out (ignore.go): a directory an
	// ignore pattern matches is entered but not listed itself, and a file
	// it matches is left out unless it is code.
	ignore *ignoreRules
}

// walkWorkers bounds the directories stat'ed at once.
func walkWorkers() int { return min(runtime.GOMAXPROCS(0), 8) }

// walkEntry is one entry of a directory in the walk.
type walkEntry struct {
	name string
	item int32     // index in walkDir.items of the entry, -1 when not listed
	sub  *walkNode // the directory entered, nil when none
}

// walkNode is one directory of the walk: its entries sorted by name, and
// the items it lists (in that order).
type walkNode struct {
	abs, rel string // rel "" for the root
	flags    uint8
	entries  []walkEntry
	items    []treeItem
	patterns []gitignore.Pattern // the ignore patterns in force in it (walkRules.ignore)
}

// walkTree lists root (symlinks in root itself resolved by the caller) by
// rules, measures every listed entry (mode, symlink target, file digest from
// the cache or by hashing) and returns the items in WalkDir order. Errors
// name the path that failed.
func (m *Measurer) walkTree(root string, rules walkRules) ([]treeItem, error) {
	st, err := lstatPath(root)
	if err != nil {
		return nil, err
	}
	var rootItem []treeItem
	if rules.root {
		rootItem = []treeItem{{kind: st.kind, rel: ".", abs: root, mode: st.mode, key: st.key, keyOK: st.keyOK}}
		if st.kind == kindSymlink {
			if rootItem[0].target, err = os.Readlink(root); err != nil {
				return nil, err
			}
		}
	}
	if st.kind != kindDir {
		if len(rootItem) == 1 && rootItem[0].kind == kindFile && rootItem[0].keyOK {
			m.mu.Lock()
			if c, ok := m.files[root]; ok && c.key == rootItem[0].key {
				rootItem[0].sum, rootItem[0].cached = c.sum, true
			}
			m.mu.Unlock()
		}
		if err := m.sumItems(rootItem); err != nil {
			return nil, err
		}
		return rootItem, nil
	}
	w := &walk{m: m, rules: rules, sem: make(chan struct{}, walkWorkers())}
	top := &walkNode{abs: root}
	if rules.ignore != nil {
		top.patterns = rules.ignore.base
	}
	w.wg.Add(1)
	w.visit(top)
	w.wg.Wait()
	if err := errors.Join(w.errs...); err != nil {
		return nil, err
	}
	items := make([]treeItem, 0, w.listed.Load()+int64(len(rootItem)))
	items = append(items, rootItem...)
	items = flatten(items, top)
	if err := m.sumItems(items); err != nil {
		return nil, err
	}
	return items, nil
}

// walk is the state of one walkTree.
type walk struct {
	m      *Measurer
	rules  walkRules
	sem    chan struct{} // a token per goroutine working on a directory
	wg     sync.WaitGroup
	failed atomic.Bool
	listed atomic.Int64
	mu     sync.Mutex
	errs   []error // guarded by mu
}

func (w *walk) fail(err error) {
	w.mu.Lock()
	w.errs = append(w.errs, err)
	w.mu.Unlock()
	w.failed.Store(true)
}

// visit reads directory n, then its subdirectories: on a goroutine of their
// own while a token is free, else on this one. It calls w.wg.Done.
func (w *walk) visit(n *walkNode) {
	defer w.wg.Done()
	if w.failed.Load() {
		return
	}
	if err := w.read(n); err != nil {
		w.fail(err)
		return
	}
	for i := range n.entries {
		sub := n.entries[i].sub
		if sub == nil {
			continue
		}
		w.wg.Add(1)
		select {
		case w.sem <- struct{}{}:
			go func() {
				defer func() { <-w.sem }()
				w.visit(sub)
			}()
		default:
			w.visit(sub)
		}
	}
}

// read lists directory n and measures the entries it lists.
func (w *walk) read(n *walkNode) error {
	d, err := openDir(n.abs)
	if err != nil {
		return err
	}
	defer d.close()
	des, err := d.f.ReadDir(-1)
	if err != nil {
		return err
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return cmp.Compare(a.Name(), b.Name()) })
	ig := w.rules.ignore
	if ig != nil && slices.ContainsFunc(des, func(de fs.DirEntry) bool { return de.Name() == ignoreFile }) {
		// Its own patterns come after its parents': a deeper
		// .gitignore decides first, as in git.
		if own := readIgnoreFile(n.abs, splitRel(n.rel)); len(own) > 0 {
			n.patterns = slices.Concat(n.patterns, own)
		}
	}
	// The path of an entry, split as ignore patterns match it: the
	// directory's names, then the entry's (one allocation per directory).
	var parts []string
	if ig != nil {
		parts = append(splitRel(n.rel), "")
	}
	n.entries = make([]walkEntry, 0, len(des))
	// Most entries are listed (a dependency tree is listed whole): one
	// allocation per directory rather than a slice growing.
	n.items = make([]treeItem, 0, len(des))
	var hits []int
	for _, de := range des {
		name := de.Name()
		e := walkEntry{name: name, item: -1}
		kind := kindOfType(de.Type())
		list, enter, flags := true, false, n.flags
		if kind == kindDir {
			enter = true
			if w.rules.dir != nil {
				flags, list, enter = w.rules.dir(n.flags, name)
			}
		} else if w.rules.file != nil {
			list = w.rules.file(n.flags, name, kind)
		}
		if !list && !enter {
			continue
		}
		abs := n.abs + string(filepath.Separator) + name
		rel := abs[len(n.abs)-len(n.rel):]
		if n.rel == "" {
			rel = name
		}
		var pre *entryStat
		if ig != nil {
			parts[len(parts)-1] = name
		}
		if list && ig != nil && matches(n.patterns, parts, kind == kindDir) {
			if kind == kindDir {
				// Entered all the same: an ignored directory may
				// hold code, which no pattern leaves out.
				list = false
			} else {
				st, err := d.stat(name, abs)
				if err != nil {
					return err
				}
				if !ig.isCode(abs, st.kind, st.mode) {
					continue
				}
				pre = &st
			}
		}
		if list {
			var st entryStat
			var err error
			if pre != nil {
				st = *pre
			} else if st, err = d.stat(name, abs); err != nil {
				return err
			}
			it := treeItem{kind: st.kind, rel: filepath.ToSlash(rel), abs: abs, mode: st.mode, key: st.key, keyOK: st.keyOK, flags: n.flags}
			if it.kind == kindSymlink {
				if it.target, err = os.Readlink(abs); err != nil {
					return err
				}
			}
			if it.kind == kindFile && it.keyOK {
				hits = append(hits, len(n.items))
			}
			e.item = int32(len(n.items))
			n.items = append(n.items, it)
			// The entry may have changed type since it was listed; the
			// stat wins.
			kind = st.kind
		}
		if enter && kind == kindDir {
			e.sub = &walkNode{abs: abs, rel: rel, flags: flags, patterns: n.patterns}
		}
		n.entries = append(n.entries, e)
	}
	w.listed.Add(int64(len(n.items)))
	// One lock for the cache lookups of the whole directory.
	if len(hits) > 0 {
		w.m.mu.Lock()
		for _, i := range hits {
			it := &n.items[i]
			if c, ok := w.m.files[it.abs]; ok && c.key == it.key {
				it.sum, it.cached = c.sum, true
			}
		}
		w.m.mu.Unlock()
	}
	return nil
}

// flatten appends n's items and those of its subdirectories in WalkDir
// order.
func flatten(out []treeItem, n *walkNode) []treeItem {
	for _, e := range n.entries {
		if e.item >= 0 {
			out = append(out, n.items[e.item])
		}
		if e.sub != nil {
			out = flatten(out, e.sub)
		}
	}
	return out
}

// sumItems hashes the files among items that the cache did not hold, on up
// to GOMAXPROCS goroutines.
func (m *Measurer) sumItems(items []treeItem) error {
	var todo []int
	for i := range items {
		if items[i].kind == kindFile && !items[i].cached {
			todo = append(todo, i)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), len(todo))
	var next atomic.Int64
	errs := make([]error, workers)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !failed.Load() {
				k := int(next.Add(1)) - 1
				if k >= len(todo) {
					return
				}
				it := &items[todo[k]]
				sum, err := m.hashAndStore(it.abs, it.key, it.keyOK)
				if err != nil {
					errs[w] = fmt.Errorf("%s: %w", it.abs, err)
					failed.Store(true)
					return
				}
				it.sum, it.cached = sum, true
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// digestItems is the tree digest over items: for each, its kind, mode bits
// (uint32, big endian), the uvarint length of its relative path, the path,
// the uvarint length of its payload and the payload (a file's SHA-256, a
// symlink's target text, nothing otherwise).
func digestItems(items []treeItem) string {
	h := sha256.New()
	var buf []byte
	for i := range items {
		buf = appendItem(buf[:0], &items[i])
		h.Write(buf)
	}
	return sumString(h)
}

func appendItem(buf []byte, it *treeItem) []byte {
	buf = append(buf, it.kind)
	buf = binary.BigEndian.AppendUint32(buf, uint32(it.mode))
	buf = binary.AppendUvarint(buf, uint64(len(it.rel)))
	buf = append(buf, it.rel...)
	switch it.kind {
	case kindFile:
		buf = binary.AppendUvarint(buf, sha256.Size)
		buf = append(buf, it.sum[:]...)
	case kindSymlink:
		buf = binary.AppendUvarint(buf, uint64(len(it.target)))
		buf = append(buf, it.target...)
	default:
		buf = binary.AppendUvarint(buf, 0)
	}
	return buf
}

func sumString(h hash.Hash) string {
	var sum [sha256.Size]byte
	return DigestPrefix + hex.EncodeToString(h.Sum(sum[:0]))
}

// entryStat is what a walk keeps of an entry's lstat.
type entryStat struct {
	kind  byte
	mode  fs.FileMode // permission and special bits only
	key   fileKey
	keyOK bool
}

func kindOfType(t fs.FileMode) byte {
	switch {
	case t.IsDir():
		return kindDir
	case t.IsRegular():
		return kindFile
	case t&fs.ModeSymlink != 0:
		return kindSymlink
	}
	return kindOther
}

const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// statOfInfo is entryStat from an fs.FileInfo.
func statOfInfo(fi fs.FileInfo) entryStat {
	key, ok := statKey(fi)
	return entryStat{kind: kindOfType(fi.Mode().Type()), mode: fi.Mode() & modeBits, key: key, keyOK: ok}
}

func lstatPath(p string) (entryStat, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return entryStat{}, err
	}
	return statOfInfo(fi), nil
}
