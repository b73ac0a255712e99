package identity

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// racyWindow is how recent a file's change time may be, relative to the start
// of hashing, for its digest to be kept out of the cache: a write landing in
// the same timestamp tick as the previous one (same size) would not change the
// cache key. Like Git's "racily clean" entries, such files are hashed again
// on every use until they are older. One second is the coarsest tick of a
// file system in use (HFS+, ext4 with 128-byte inodes); a file system whose
// tick is known is given a window of two of its ticks (racyWindowOf).
const racyWindow = time.Second

// racyWindowOf returns the racy window of the file open as f, whose key is
// key: two ticks of the clock that stamps its change time where that tick
// is known (stampTick: a Linux file system that stamps from the kernel's
// clock with nanoseconds, and the file's change time has a sub-second
// part, so it is not kept in whole seconds), else racyWindow.
//
// Why that is enough: a write stamps the change time from the kernel's
// coarse clock, which lags the real time by less than one tick (or from
// the fine clock, which only makes stamps later). A write at or after the
// moment hashing starts (start) therefore gets a change time after
// start − tick. If the key's change time is older than start − 2·tick,
// every write that could keep the key (same change time) happened before
// hashing started, so the bytes read are those the key names; a later
// write moves the change time and misses the cache. The second tick is a
// margin for the moments between the stat that gave key and start. A
// change of the wall clock backwards by more than that margin defeats it,
// as it defeats the one-second window by more than a second.
func (m *Measurer) racyWindowOf(f *os.File, key fileKey) time.Duration {
	if key.ctime%int64(time.Second) == 0 {
		return racyWindow // whole seconds: the file system may keep no more
	}
	m.mu.Lock()
	tick, known := m.ticks[key.dev]
	m.mu.Unlock()
	if !known {
		tick = 0
		if m.stampTick != nil {
			if t, ok := m.stampTick(f); ok {
				tick = t
			}
		}
		m.mu.Lock()
		m.ticks[key.dev] = tick
		m.mu.Unlock()
	}
	if tick <= 0 {
		return racyWindow
	}
	return 2 * tick
}

// settled reports whether a file whose key was read again after hashing
// (akey) is old enough, relative to start, for its digest to be cached.
func (m *Measurer) settled(f *os.File, akey fileKey, start time.Time) bool {
	edge := start.Add(-m.racyWindowOf(f, akey)).UnixNano()
	return akey.ctime <= edge && akey.mtime <= edge
}

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
	if !ok || akey != key || !m.settled(f, akey, start) {
		return sum, nil
	}
	m.mu.Lock()
	m.files[abs] = cachedDigest{key: key, sum: sum}
	// The same version of the same file, by device and inode: a process
	// that runs it is digested from the cache through the kernel's view
	// (DigestOpen of /proc/PID/exe), without reading it again.
	m.opened[key] = sum
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
	key    fileKey
	keyOK  bool  // key is known (the system gives a change time)
	cached bool  // sum is known (from the cache, or hashed)
	flags  uint8 // the walk flags of its directory (see walkRules)
	sum    [sha256.Size]byte
}

// DigestTree returns "sha256:<hex>" over the tree at root (symlinks in root
// itself resolved first), deterministic across machines: for every entry in
// the order of filepath.WalkDir (depth first, names sorted within each
// directory), its kind (directory, file, symlink, other), permission and
// special mode bits, its slash-separated relative path, and the payload — a
// file's SHA-256, a symlink's target text (never followed), nothing for
// directories, sockets, pipes and devices. Timestamps, owners and inode
// numbers are not part of the digest. Files are cached as in
// [Measurer.DigestFile], so an unchanged tree costs one stat per entry (see
// walk.go). Errors name the path that failed.
func (m *Measurer) DigestTree(root string) (string, error) {
	return m.digestTree(root, nil)
}

// DigestTreeData is [Measurer.DigestTree] with data left out: the files
// and directories that the tree's .gitignore files, [DefaultIgnores] and
// patterns (gitignore syntax, relative to root) mark as ignored, except
// code (see ignore.go), which no pattern leaves out; code lists files
// (absolute, symlinks resolved) that are code whatever their name. An
// ignored directory is entered all the same, and its code measured.
func (m *Measurer) DigestTreeData(root string, patterns, code []string) (string, error) {
	return m.digestTree(root, newIgnoreRules(patterns, code))
}

func (m *Measurer) digestTree(root string, ig *ignoreRules) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	items, err := m.walkTree(real, walkRules{root: true, ignore: ig})
	if err != nil {
		return "", fmt.Errorf("digesting tree %s: %w", root, err)
	}
	return digestItems(items), nil
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
			if akey, ok := statKey(after); ok && akey == key && m.settled(f, akey, start) {
				m.mu.Lock()
				m.opened[key] = sum
				m.mu.Unlock()
			}
		}
	}
	return DigestPrefix + hex.EncodeToString(sum[:]), nil
}
