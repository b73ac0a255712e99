//go:build unix

package supervisor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// What code a process of the tree runs (docs/DESIGN.md "Execution
// identity", "The code of a process"). The epoch names the code that
// answers, so what matters of a process is the files it runs — its
// executable and, for an interpreter, its script — and whether each is code
// the epoch already stands for:
//
//   - a file only root can change (it and every directory above it belong
//     to root, with no group or other write bit) is not code under review:
//     /usr/bin/git, /bin/sleep, the system's python3;
//   - a file whose digest the launch measured (executable, interpreter,
//     entry, wrappers) or that a process recorded for the epoch runs is the
//     epoch's code;
//   - a file inside a measured scope (the entry's package, a watched path)
//     whose change time is older than the measurement is the code that was
//     on disk when the epoch was measured: the build watcher reports any
//     later change there.
//
// Anything else is code the person could have changed and nobody measured:
// a process running it that can read the server's requests, or that writes
// its output, is a new epoch.

// Code is what the launch measured of the server's code: the digests of
// the files it names (executable, interpreter, entry, wrappers), the
// directories it measured as trees (the entry's package, watched
// directories) and when the measurement began.
type Code struct {
	Digests []string
	Dirs    []string
	Since   time.Time
}

// mutableCache remembers files found not to be the person's to change, by
// path and the file's device and inode: only their owner (another user)
// can change that, and a new file at the path has another inode.
var mutableCache sync.Map // string -> struct{}

// personCanChange reports whether the person could have changed the file
// at path: it is code under review unless the file and every directory
// above it belong to root and no one else may write them (no group or
// other write bit; for a daemon that is not root, no ACL that lets it
// write either) — the operating system's files. For a daemon running as
// root, whose person owns everything root owns, only such files in the
// system's own directories (/usr but /usr/local, /bin, /sbin, /lib*) are
// the system's. A file that cannot be read about counts as changeable.
func personCanChange(path string) bool {
	if path == "" || !filepath.IsAbs(path) {
		return true
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return true
	}
	key := path + "\x00" + itoa(uint64(st.Dev)) + ":" + itoa(st.Ino)
	if _, ok := mutableCache.Load(key); ok {
		return false
	}
	root := os.Geteuid() == 0
	if root && !inSystemPrefix(path) {
		// Root's own files (its home, a checkout anywhere) belong to root
		// too: only the operating system's directories tell them apart.
		return true
	}
	for p := path; ; p = filepath.Dir(p) {
		var ps syscall.Stat_t
		if err := syscall.Stat(p, &ps); err != nil {
			return true
		}
		if ps.Uid != 0 || ps.Mode&0o022 != 0 {
			return true
		}
		if !root && unix.Faccessat(unix.AT_FDCWD, p, unix.W_OK, unix.AT_EACCESS) == nil {
			return true
		}
		if p == "/" {
			break
		}
	}
	mutableCache.Store(key, struct{}{})
	return false
}

// inSystemPrefix reports whether path lies where the operating system's
// packages put programs: /usr (not /usr/local), /bin, /sbin and /lib*.
func inSystemPrefix(path string) bool {
	if strings.HasPrefix(path, "/usr/local/") {
		return false
	}
	for _, d := range []string{"/usr/", "/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/"} {
		if strings.HasPrefix(path, d) {
			return true
		}
	}
	return false
}

// underReview reports whether o runs a file the person could change.
func underReview(o identity.Observed) bool {
	for _, f := range codeFiles(o) {
		if personCanChange(f[0]) {
			return true
		}
	}
	return false
}

func itoa(n uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// codeFiles are the files o runs, each with its digest ("" unknown).
func codeFiles(o identity.Observed) [][2]string {
	out := [][2]string{{o.Exe, o.SHA256}}
	if o.Script != "" {
		out = append(out, [2]string{o.Script, o.ScriptSHA256})
	}
	return out
}

// epochCodeLocked reports whether o runs only code the current epoch
// stands for (see the rules above); why names the first file that is not.
func (p *Process) epochCodeLocked(o identity.Observed) (ok bool, why string) {
	for _, f := range codeFiles(o) {
		path, sum := f[0], f[1]
		if path == "" {
			return false, "its executable could not be read"
		}
		if !personCanChange(path) {
			continue
		}
		if sum != "" && p.knownDigestLocked(sum) {
			continue
		}
		if p.inMeasuredScope(path) {
			continue
		}
		if sum == "" {
			return false, path + " could not be digested"
		}
		return false, path + " (" + short(sum) + ") is not code this epoch measured"
	}
	return true, ""
}

// knownDigestLocked: sum is a digest the launch measured or a process
// recorded for the current epoch runs.
func (p *Process) knownDigestLocked(sum string) bool {
	if slices.Contains(p.code.Digests, sum) {
		return true
	}
	for _, m := range p.tree.recorded {
		if m.obs.SHA256 == sum || m.obs.ScriptSHA256 == sum {
			return true
		}
	}
	return false
}

// inMeasuredScope: path lies in a directory the launch measured as a tree
// and has not changed since the measurement began.
func (p *Process) inMeasuredScope(path string) bool {
	if p.code.Since.IsZero() {
		return false
	}
	in := false
	for _, d := range p.code.Dirs {
		if d != "" && (path == d || strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/")) {
			in = true
			break
		}
	}
	if !in {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false
	}
	return changeTime(&st).Before(p.code.Since)
}

func short(sum string) string {
	s := strings.TrimPrefix(sum, "sha256:")
	if len(s) > 12 {
		s = s[:12]
	}
	return s
}
