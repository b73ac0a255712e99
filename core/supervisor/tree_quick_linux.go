//go:build linux

package supervisor

import (
	"bytes"
	"errors"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// quickFiles are the /proc files the quick check of the tree reads
// (Process.quickLocked), kept open between checks: opening a /proc file
// costs several times what reading it again costs. An open /proc/PID file
// stays bound to its process: once the process is reaped a read fails
// with ESRCH, and a reused pid never answers through it. Guarded by
// Process.treeMu; closed when the tree watcher ends, after which nothing
// is cached and forks reports no counter (every check reads the tree).
type quickFiles struct {
	stat   int // /proc/stat, for the fork counter, plus one (0: not open)
	closed bool
	procs  map[int]*pidFiles // by pid, for the processes of the base
	buf    []byte            // /proc/stat's text
	cmd    [8192]byte        // a cmdline, as much as viewOf reads
	line   [512]byte         // a /proc/PID/stat line
	// counter, when set, replaces /proc/stat as the fork counter (tests).
	counter func() (uint64, bool)
}

// maxKept bounds the processes whose files a tree keeps open (three each);
// the others are opened for each check.
const maxKept = 64

// pidFiles are one process's open /proc files.
type pidFiles struct {
	start   uint64
	dir     int // /proc/PID (O_PATH), for its exe; -1 when not open
	stat    int // /proc/PID/stat; -1 when not open
	cmdline int // /proc/PID/cmdline; -1 when not open
}

func (p *pidFiles) close() {
	for _, fd := range []int{p.dir, p.stat, p.cmdline} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// forks returns the number of processes (and threads) the kernel created
// since boot, the "processes" line of /proc/stat (an unsigned long: it
// does not wrap on a 64-bit kernel); ok is false when it cannot be read.
func (q *quickFiles) forks() (uint64, bool) {
	if q.closed {
		return 0, false
	}
	if q.counter != nil {
		return q.counter()
	}
	if q.stat == 0 {
		fd, err := syscall.Open("/proc/stat", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return 0, false
		}
		q.stat = fd + 1
		q.buf = make([]byte, 4096)
	}
	for {
		// One read: /proc/stat is generated whole, and a buffer it
		// does not fill holds all of it (forksIn refuses a cut line).
		n, err := syscall.Pread(q.stat-1, q.buf, 0)
		if err != nil {
			return 0, false
		}
		if n == len(q.buf) {
			if len(q.buf) >= 1<<22 {
				return 0, false
			}
			q.buf = make([]byte, 2*len(q.buf))
			continue
		}
		return forksIn(q.buf[:n])
	}
}

// forksIn reads the "processes" line of a /proc/stat text.
func forksIn(b []byte) (uint64, bool) {
	const key = "\nprocesses "
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	b = b[i+len(key):]
	end := 0
	for end < len(b) && b[end] >= '0' && b[end] <= '9' {
		end++
	}
	if end == len(b) || b[end] != '\n' {
		return 0, false // cut short: a prefix of the number is another number
	}
	return atou(b[:end])
}

// same reads process v.pid again: procSame when it still has v's start
// time and parent and runs v's file (device and inode) with v's
// arguments, procGone when it exited (or is a zombie), procChanged
// otherwise (an exec, a new parent, a read that failed).
func (q *quickFiles) same(v *procView) int {
	if q.closed {
		return procChanged
	}
	f, ok := q.procs[v.pid]
	if ok && f.start != v.start {
		f.close()
		delete(q.procs, v.pid)
		ok = false
	}
	if !ok {
		var err error
		if f, err = openPid(v.pid); err != nil {
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESRCH) {
				return procGone
			}
			return procChanged
		}
		f.start = v.start
		if len(q.procs) < maxKept {
			if q.procs == nil {
				q.procs = map[int]*pidFiles{}
			}
			q.procs[v.pid] = f
		} else {
			// A tree this large keeps no more files open: a server
			// must not exhaust the daemon's descriptors.
			defer f.close()
		}
	}
	n, err := syscall.Pread(f.stat, q.line[:], 0) // one read: a cut line fails parseStat or compares unequal
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return procGone
		}
		return procChanged
	}
	st, ok := parseStat(q.line[:n])
	switch {
	case !ok:
		return procChanged
	case st.state == 'Z':
		return procGone
	case st.start != v.start:
		return procChanged // another process behind the pid: never through an open file, but checked
	case st.ppid != v.ppid:
		return procChanged
	}
	var fst syscall.Stat_t
	var key [48]byte
	k := key[:0]
	if fstatat(f.dir, &exeName[0], &fst) == nil {
		k = strconv.AppendUint(k, fst.Dev, 10)
		k = append(k, ':')
		k = strconv.AppendUint(k, fst.Ino, 10)
	}
	if string(k) != v.exeKey {
		return procChanged
	}
	// One read: the kernel copies the whole argument area up to the
	// buffer's size in one call (a second read would return 0), as much
	// as viewOf's reads saw.
	n, err = syscall.Pread(f.cmdline, q.cmd[:], 0)
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return procGone
		}
		return procChanged
	}
	if !argsEqual(q.cmd[:n], v.args) {
		return procChanged
	}
	return procSame
}

var exeName = [4]byte{'e', 'x', 'e', 0}

// fstatat is fstatat(2) of name (NUL-terminated) under dir, following
// the magic link: syscall's own converts the name, which allocates.
func fstatat(dir int, name *byte, st *syscall.Stat_t) error {
	_, _, e := syscall.Syscall6(syscall.SYS_NEWFSTATAT, uintptr(dir), uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(st)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func openPid(pid int) (*pidFiles, error) {
	dir := "/proc/" + strconv.Itoa(pid)
	f := &pidFiles{dir: -1, stat: -1, cmdline: -1}
	var err error
	if f.dir, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		f.dir = -1
		return nil, err
	}
	if f.stat, err = unix.Openat(f.dir, "stat", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		f.stat = -1
		f.close()
		return nil, err
	}
	if f.cmdline, err = unix.Openat(f.dir, "cmdline", unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
		f.cmdline = -1
		f.close()
		return nil, err
	}
	return f, nil
}

// argsEqual reports whether cmdline b (NUL-separated, as /proc/PID/cmdline
// gives it) reads as args the way viewOf splits it.
func argsEqual(b []byte, args []string) bool {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return len(args) == 0
	}
	for i, a := range args {
		if i > 0 {
			if len(b) == 0 || b[0] != 0 {
				return false
			}
			b = b[1:]
		}
		if len(b) < len(a) || string(b[:len(a)]) != a {
			return false
		}
		b = b[len(a):]
	}
	return len(b) == 0
}

// retain closes the files of processes that are not in ms any more.
func (q *quickFiles) retain(ms []member) {
	for pid, f := range q.procs {
		keep := false
		for i := range ms {
			if ms[i].view.pid == pid && ms[i].view.start == f.start {
				keep = true
				break
			}
		}
		if !keep {
			f.close()
			delete(q.procs, pid)
		}
	}
}

// close closes every file; later checks read the whole tree.
func (q *quickFiles) close() {
	for pid, f := range q.procs {
		f.close()
		delete(q.procs, pid)
	}
	if q.stat > 0 {
		syscall.Close(q.stat - 1)
		q.stat = 0
	}
	q.closed = true
}
