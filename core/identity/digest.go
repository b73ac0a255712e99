package identity

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// racyWindow is how recent a file's change time may be, relative to the start
// of hashing, for its digest to be kept out of the cache: a write landing in
// the same timestamp tick as the previous one (same size) would not change the
// cache key. Like Git's "racily clean" entries, such files are hashed again
// on every use until they are older.
const racyWindow = time.Second

// copyBufSize is the read buffer for hashing files.
const copyBufSize = 256 << 10

var copyBufs = sync.Pool{New: func() any { b := make([]byte, copyBufSize); return &b }}

// fileKey identifies one version of a file without reading it:
// (device, inode, size, mtime, ctime).
type fileKey struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // Unix nanoseconds
}

type cachedDigest struct {
	key fileKey
	sum [sha256.Size]byte
}

// DigestFile returns "sha256:<hex>" of the regular file at path (symlinks
// followed). Results are cached by absolute path and (device, inode, size,
// mtime, ctime), so an unchanged file is not read again. Errors name the path:
// a missing file wraps fs.ErrNotExist; a directory or device is refused.
func (m *Measurer) DigestFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("digesting %s: %w", path, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("digesting %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("digesting %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	sum, err := m.fileSum(abs, fi)
	if err != nil {
		return "", fmt.Errorf("digesting %s: %w", path, err)
	}
	return DigestPrefix + hex.EncodeToString(sum[:]), nil
}

// fileSum returns the cached or freshly computed SHA-256 of the regular file abs
// whose stat result is fi.
func (m *Measurer) fileSum(abs string, fi fs.FileInfo) ([sha256.Size]byte, error) {
	key, keyOK := statKey(fi)
	if keyOK {
		m.mu.Lock()
		c, hit := m.files[abs]
		m.mu.Unlock()
		if hit && c.key == key {
			return c.sum, nil
		}
	}
	return m.hashAndStore(abs, key, keyOK)
}

// hashAndStore reads abs, and caches the sum under key when keyOK, the file
// did not change while it was read, and it is not racily recent.
func (m *Measurer) hashAndStore(abs string, key fileKey, keyOK bool) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	start := m.now()
	f, err := os.Open(abs)
	if err != nil {
		return sum, err
	}
	defer f.Close()
	h := sha256.New()
	if err := copyInto(h, f); err != nil {
		return sum, err
	}
	h.Sum(sum[:0])
	if !keyOK {
		return sum, nil
	}
	after, err := f.Stat()
	if err != nil {
		return sum, err
	}
	akey, ok := statKey(after)
	if !ok || akey != key || akey.ctime > start.Add(-racyWindow).UnixNano() || akey.mtime > start.Add(-racyWindow).UnixNano() {
		return sum, nil
	}
	m.mu.Lock()
	m.files[abs] = cachedDigest{key: key, sum: sum}
	m.mu.Unlock()
	return sum, nil
}

func copyInto(h hash.Hash, r io.Reader) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	// Wrap r so io.CopyBuffer does not take os.File's WriterTo path, which
	// ignores our buffer.
	_, err := io.CopyBuffer(h, struct{ io.Reader }{r}, *bp)
	return err
}

// Tree entry kinds, written into the tree digest.
const (
	kindDir     = 'd'
	kindFile    = 'f'
	kindSymlink = 'l'
	kindOther   = 'o'
)

type treeItem struct {
	kind   byte
	rel    string // slash-separated, "." for the root
	abs    string
	mode   fs.FileMode
	target string // symlink text
	sum    [sha256.Size]byte
}

// DigestTree returns "sha256:<hex>" over the tree at root (symlinks in root
// itself resolved first), deterministic across machines: for every entry in
// lexical order of its slash-separated relative path, its kind (directory,
// file, symlink, other), permission and special mode bits, the path, and the
// payload — a file's SHA-256, a symlink's target text (never followed), nothing
// for directories, sockets, pipes and devices. Timestamps, owners and inode
// numbers are not part of the digest. Files are cached as in
// [Measurer.DigestFile], so an unchanged tree costs one lstat per entry; the
// lstats and any hashing run on up to GOMAXPROCS goroutines. Errors name the
// path that failed.
func (m *Measurer) DigestTree(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	// Listing only: names and types come from the directory entries, so no
	// stat happens here.
	var items []treeItem
	err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "."
		if p != real {
			// WalkDir joins names onto real, so p starts with it.
			rel = filepath.ToSlash(strings.TrimPrefix(p[len(real):], string(filepath.Separator)))
		}
		it := treeItem{rel: rel, abs: p}
		switch t := d.Type(); {
		case t.IsDir():
			it.kind = kindDir
		case t.IsRegular():
			it.kind = kindFile
		case t&fs.ModeSymlink != 0:
			it.kind = kindSymlink
		default:
			it.kind = kindOther
		}
		items = append(items, it)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	if err := m.fillItems(items); err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
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
		h.Write(buf)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// fillChunk is how many tree entries one worker claims at a time.
const fillChunk = 128

// fillItems lstats every item for its mode, reads symlink targets, and sums
// files from the cache or by hashing, on up to GOMAXPROCS workers.
func (m *Measurer) fillItems(items []treeItem) error {
	workers := min(runtime.GOMAXPROCS(0), (len(items)+fillChunk-1)/fillChunk)
	var next atomic.Int64
	errs := make([]error, workers)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for !failed.Load() {
				start := int(next.Add(fillChunk)) - fillChunk
				if start >= len(items) {
					return
				}
				for i := start; i < min(start+fillChunk, len(items)); i++ {
					if err := m.fillItem(&items[i]); err != nil {
						errs[w] = err
						failed.Store(true)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Measurer) fillItem(it *treeItem) error {
	fi, err := os.Lstat(it.abs)
	if err != nil {
		return err
	}
	// The entry may have changed type since it was listed; the lstat wins.
	switch t := fi.Mode().Type(); {
	case t.IsDir():
		it.kind = kindDir
	case t.IsRegular():
		it.kind = kindFile
	case t&fs.ModeSymlink != 0:
		it.kind = kindSymlink
	default:
		it.kind = kindOther
	}
	it.mode = fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	switch it.kind {
	case kindSymlink:
		if it.target, err = os.Readlink(it.abs); err != nil {
			return err
		}
	case kindFile:
		key, keyOK := statKey(fi)
		if keyOK {
			m.mu.Lock()
			c, hit := m.files[it.abs]
			m.mu.Unlock()
			if hit && c.key == key {
				it.sum = c.sum
				return nil
			}
		}
		if it.sum, err = m.hashAndStore(it.abs, key, keyOK); err != nil {
			return fmt.Errorf("%s: %w", it.abs, err)
		}
	}
	return nil
}

// DigestOpen returns "sha256:<hex>" of the open regular file f, read from
// its start with ReadAt (f's offset is left alone). Results are cached by
// (device, inode, size, mtime, ctime) alone, without a path: it is meant for
// files opened through the kernel's view of a process (Linux
// /proc/PID/exe), whose path may name another file or none.
func (m *Measurer) DigestOpen(f *os.File) (string, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("digesting %s: %w", f.Name(), err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("digesting %s: not a regular file (%s)", f.Name(), fi.Mode().Type())
	}
	key, keyOK := statKey(fi)
	if keyOK {
		m.mu.Lock()
		sum, hit := m.opened[key]
		m.mu.Unlock()
		if hit {
			return DigestPrefix + hex.EncodeToString(sum[:]), nil
		}
	}
	start := m.now()
	h := sha256.New()
	if err := copyInto(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
		return "", fmt.Errorf("digesting %s: %w", f.Name(), err)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	if keyOK {
		if after, err := f.Stat(); err == nil {
			if akey, ok := statKey(after); ok && akey == key &&
				akey.ctime <= start.Add(-racyWindow).UnixNano() && akey.mtime <= start.Add(-racyWindow).UnixNano() {
				m.mu.Lock()
				m.opened[key] = sum
				m.mu.Unlock()
			}
		}
	}
	return DigestPrefix + hex.EncodeToString(sum[:]), nil
}
