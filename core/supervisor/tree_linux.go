//go:build linux

package supervisor

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// scanTree reads, from /proc, the live processes of root's tree (children
// from /proc/PID/task/*/children, or a scan of every process's parent pid
// where the kernel lacks that file), those of keep that still run (the
// processes of the last read, wherever they were reparented: an orphan
// stays in the tree, marked or not), and those of extra and of this
// process's own children whose environment carries the mark (an orphan
// reparented to the daemon when it is a child subreaper, seen for the
// first time): for each one its parent, start time, executable, the
// running file's identity, arguments, working directory, and whether it
// holds one of the pipes. A process launcher names (the sandbox's, above
// the server) is neither read nor walked from.
func scanTree(root int, extra []int, keep []procView, mark string, pipes []uint64, _ string, known func(procView) (procView, bool), launcher func(pid int, start uint64, exe string) bool, orphans bool) ([]procView, error) {
	rs, err := readStat(root)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", root, err)
	}
	roots := []int{root}
	if rs.state == 'Z' {
		roots = roots[:0]
	}
	marks := map[string]bool{mark: true}
	hasMark := func(pid int) bool {
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			return false
		}
		_, ok := envHas(env, marks)
		return ok
	}
	for _, pid := range extra {
		if hasMark(pid) {
			roots = append(roots, pid)
		}
	}
	// kept reports whether pid is still the process of keep it was.
	kept := func(pid int) bool {
		for _, k := range keep {
			if k.pid == pid {
				st, err := readStat(pid)
				return err == nil && st.start == k.start && st.state != 'Z'
			}
		}
		return false
	}
	if orphans {
		// An orphan goes to the first live thread of its nearest
		// subreaper ancestor (kernel/exit.c find_new_reaper), the
		// daemon's main thread: only that thread's children are read,
		// not those its other threads started (the servers).
		self := os.Getpid()
		buf := make([]byte, 4096)
		b, _ := readAll("/proc/"+strconv.Itoa(self)+"/task/"+strconv.Itoa(self)+"/children", &buf)
		for _, pid := range appendPids(nil, b) {
			if pid == root {
				continue
			}
			if kept(pid) || hasMark(pid) {
				roots = append(roots, pid)
			}
		}
	}
	seen := map[int]bool{}
	var out []procView
	walk := func(roots []int) {
		for i := 0; i < len(roots); i++ {
			pid := roots[i]
			if seen[pid] {
				continue
			}
			seen[pid] = true
			v, ok := viewOf(pid, pipes, known)
			if !ok || launcher(v.pid, v.start, v.exe) {
				continue
			}
			out = append(out, v)
			kids, err := childrenOf(pid)
			if err != nil {
				continue
			}
			roots = append(roots, kids...)
		}
	}
	walk(roots)
	for _, k := range keep {
		// A process of the last read that no longer descends from a
		// root (its parent exited and it went to the daemon, to init,
		// or to a subreaper of its own tree): the same process if its
		// start time is the same.
		if !seen[k.pid] && kept(k.pid) {
			walk([]int{k.pid})
		}
	}
	return out, nil
}

// childrenOf lists pid's children from /proc/PID/task/*/children (Linux
// 3.5 with CONFIG_PROC_CHILDREN), else by scanning every process's parent.
func childrenOf(pid int) ([]int, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []int
	buf := make([]byte, 4096)
	for _, t := range tasks {
		b, err := readAll(dir+"/"+t.Name()+"/children", &buf)
		if err != nil {
			if os.IsNotExist(err) {
				return childrenByScan(pid)
			}
			continue
		}
		out = appendPids(out, b)
	}
	return out, nil
}

// appendPids appends the pids of a children file's text to out.
func appendPids(out []int, b []byte) []int {
	for f := range bytes.FieldsSeq(b) {
		if c, ok := atou(f); ok && c <= 1<<22 {
			out = append(out, int(c))
		}
	}
	return out
}

// readAll reads a /proc file to its end into *buf, grown as needed (at
// most 16 MiB). A children file is generated one page at a time: a
// single read of a thread with more than about 600 children would
// return only the first of them, and the rest would not be in the tree.
func readAll(path string, buf *[]byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	b := *buf
	n := 0
	for {
		if n == len(b) {
			if len(b) >= 16<<20 {
				return nil, &os.PathError{Op: "read", Path: path, Err: syscall.EFBIG}
			}
			b = append(b, make([]byte, len(b))...)
			*buf = b
		}
		m, err := syscall.Read(fd, b[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			return b[:n], nil
		}
		n += m
	}
}

func childrenByScan(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, err := ppidOf(c); err == nil && pp == pid {
			out = append(out, c)
		}
	}
	return out, nil
}

func ppidOf(pid int) (int, error) {
	st, err := readStat(pid)
	return st.ppid, err
}

// viewOf reads one process; ok is false for a zombie or a gone process.
// known returns what an earlier scan saw of a process with the same pid,
// start time, executable and arguments, whose pipes and working directory
// are then not read again.
func viewOf(pid int, pipes []uint64, known func(procView) (procView, bool)) (procView, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	st, err := readStat(pid)
	if err != nil || st.state == 'Z' {
		return procView{}, false
	}
	v := procView{pid: pid, ppid: st.ppid, start: st.start}
	var lbuf [4096]byte
	n, err := syscall.Readlink(dir+"/exe", lbuf[:])
	switch {
	case err == nil:
		// A running file that was replaced or removed on disk reads
		// "PATH (deleted)": the process still runs the same file.
		v.exe = strings.TrimSuffix(string(lbuf[:n]), " (deleted)")
	case err == syscall.ENOENT:
		// No memory map: the process is exiting (do_exit released it
		// before the process becomes a zombie), or is gone. It can
		// answer nothing more; read as an exec, its "(executable
		// unknown)" would start an epoch for a crash. EACCES (a process
		// that is not dumpable) still counts, as unknown.
		return procView{}, false
	}
	// Device and inode: a running executable cannot be written (ETXTBSY)
	// and is not freed while it runs, so they change only with an exec;
	// its ctime changes when it is unlinked, which is no exec.
	var fst syscall.Stat_t
	switch err := syscall.Stat(dir+"/exe", &fst); err {
	case nil:
		v.exeKey = fmt.Sprintf("%d:%d", fst.Dev, fst.Ino)
	case syscall.ENOENT:
		// Exiting since the readlink above (its memory map released in
		// between): read with no key, it would look exec'd, "PATH (was
		// PATH)", and start an epoch for a process that is ending.
		return procView{}, false
	}
	var cbuf [8192]byte
	if b, err := readSmall(dir+"/cmdline", cbuf[:]); err == nil {
		b = bytes.TrimSuffix(b, []byte{0})
		if len(b) > 0 {
			v.args = strings.Split(string(b), "\x00")
		}
	}
	if k, ok := known(v); ok {
		v.cwd, v.stdio = k.cwd, k.stdio
		return v, true
	}
	if n, err := syscall.Readlink(dir+"/cwd", lbuf[:]); err == nil {
		v.cwd = string(lbuf[:n])
	}
	v.stdio = holdsPipe(dir+"/fd", pipes)
	// Re-read the start time: a pid reused while it was read would mix two
	// processes.
	if again, err := readStat(pid); err != nil || again.start != st.start {
		return procView{}, false
	}
	return v, true
}

// holdsPipe reports whether any descriptor in fdDir is one of pipes. A
// directory that cannot be read (another user's process) counts as holding
// them: it is not known not to.
func holdsPipe(fdDir string, pipes []uint64) bool {
	if len(pipes) == 0 {
		return true
	}
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return true
	}
	want := make([]string, len(pipes))
	for i, ino := range pipes {
		want[i] = "pipe:[" + strconv.FormatUint(ino, 10) + "]"
	}
	for _, fd := range fds {
		l, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue
		}
		for _, w := range want {
			if l == w {
				return true
			}
		}
	}
	return false
}

// digestRunning digests the file process pid executes through
// /proc/PID/exe, which reads the running file even if its path was
// replaced on disk.
func digestRunning(m *identity.Measurer, pid int, _ string) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return "", err
	}
	defer f.Close()
	return m.DigestOpen(f)
}

// viewOne reads one process as a scan would, without what an earlier
// scan knew of it.
func viewOne(pid int, pipes []uint64) (procView, bool) {
	return viewOf(pid, pipes, func(procView) (procView, bool) { return procView{}, false })
}

// newWakeups watches the answerers' exits through pidfds, which the Go
// runtime's poller waits on: no thread and no timer per process.
func newWakeups() wakeups {
	return &pidfdWakeups{c: make(chan struct{}, 1), files: map[int]*os.File{}}
}

type pidfdWakeups struct {
	c     chan struct{}
	mu    sync.Mutex
	files map[int]*os.File // guarded by mu
	done  bool             // guarded by mu
}

func (w *pidfdWakeups) C() <-chan struct{} { return w.c }

func (w *pidfdWakeups) watch(pids []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	for _, pid := range pids {
		if _, ok := w.files[pid]; ok {
			continue
		}
		fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
		if err != nil {
			// Gone already (or pidfds unsupported): one read now tells.
			w.kick()
			continue
		}
		unix.CloseOnExec(fd)
		f := os.NewFile(uintptr(fd), "pidfd")
		w.files[pid] = f
		go w.wait(pid, f)
	}
}

// wait blocks in the poller until the process of f exits (its pidfd turns
// readable), then wakes the watcher.
func (w *pidfdWakeups) wait(pid int, f *os.File) {
	rc, err := f.SyscallConn()
	if err == nil {
		err = rc.Read(func(fd uintptr) bool {
			n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return n > 0
		})
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.files[pid] == f {
		delete(w.files, pid)
		f.Close()
	}
	if err == nil && !w.done {
		w.kick()
	}
}

func (w *pidfdWakeups) kick() {
	select {
	case w.c <- struct{}{}:
	default:
	}
}

func (w *pidfdWakeups) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	for pid, f := range w.files {
		f.Close()
		delete(w.files, pid)
	}
}

// treeSupported: /proc gives the tree.
const treeSupported = true
