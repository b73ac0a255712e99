//go:build darwin

package supervisor

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// treeSupported: kern.proc.all and kern.procargs2 give the tree.
const treeSupported = true

// scanTree reads the live processes of root's tree and of the marked
// processes in extra from kern.proc.all (parent pids, start times) and
// kern.procargs2 (executable path, arguments, environment), and which of
// them hold the server's pipes from libproc (see holdsPipes and markStdio; a process whose
// descriptors cannot be read counts as holding them). No working directory
// is read, so a relative script is resolved against dir, the launch's.
func scanTree(root int, extra []int, keep []procView, mark string, pipes []uint64, dir string, known func(procView) (procView, bool), _ func(int, uint64, string) bool, _ bool) ([]procView, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	children := map[int][]int{}
	kps := map[int]*unix.KinfoProc{}
	for i := range procs {
		kp := &procs[i]
		if kp.Proc.P_stat == darwinZombie {
			continue
		}
		pid := int(kp.Proc.P_pid)
		kps[pid] = kp
		children[int(kp.Eproc.Ppid)] = append(children[int(kp.Eproc.Ppid)], pid)
	}
	if _, ok := kps[root]; !ok {
		return nil, fmt.Errorf("process %d: %w", root, os.ErrNotExist)
	}
	roots := []int{root}
	marks := map[string]bool{mark: true}
	for _, pid := range extra {
		if _, ok := kps[pid]; !ok {
			continue
		}
		if b, err := unix.SysctlRaw("kern.procargs2", pid); err == nil {
			if _, env, ok := parseProcargs2(b); ok {
				if _, ok := envHas(env, marks); ok {
					roots = append(roots, pid)
				}
			}
		}
	}
	// The processes of the last read that still run, wherever they were
	// reparented: an orphan stays in the tree, marked or not.
	for _, k := range keep {
		if kp, ok := kps[k.pid]; ok && startOf(kp) == k.start {
			roots = append(roots, k.pid)
		}
	}
	seen := map[int]bool{}
	var out []procView
	for i := 0; i < len(roots); i++ {
		pid := roots[i]
		kp, ok := kps[pid]
		if !ok || seen[pid] {
			continue
		}
		seen[pid] = true
		v := procView{pid: pid, ppid: int(kp.Eproc.Ppid), start: startOf(kp), cwd: dir, stdio: true}
		if b, err := unix.SysctlRaw("kern.procargs2", pid); err == nil {
			v.exe, v.args = procargsArgs(b)
		}
		var st syscall.Stat_t
		if v.exe != "" && syscall.Stat(v.exe, &st) == nil {
			v.exeKey = fmt.Sprintf("%d:%d:%d:%d:%d", st.Dev, st.Ino, st.Size, st.Mtimespec.Nano(), st.Ctimespec.Nano())
		}
		out = append(out, v)
		roots = append(roots, children[pid]...)
	}
	markStdio(out, known, func(pid int) (bool, bool) { return holdsPipes(pid, pipes) })
	return out, nil
}

// procargsArgs returns the executable path and the argc arguments of a
// kern.procargs2 answer (see parseProcargs2).
func procargsArgs(b []byte) (string, []string) {
	exe, _, ok := parseProcargs2(b)
	if !ok {
		return "", nil
	}
	argc := int(binary.NativeEndian.Uint32(b[:4]))
	rest := b[4+len(exe):]
	for len(rest) > 0 && rest[0] == 0 {
		rest = rest[1:]
	}
	var args []string
	for range argc {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			break
		}
		args = append(args, string(rest[:i]))
		rest = rest[i+1:]
	}
	return exe, args
}

// digestRunning digests the file at the path the kernel recorded at exec
// time: unlike Linux this cannot reach a running file replaced on disk.
func digestRunning(m *identity.Measurer, _ int, exe string) (string, error) {
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return m.DigestOpen(f)
}

// kqWakeups turns kqueue EVFILT_PROC events (NOTE_FORK, NOTE_EXEC,
// NOTE_EXIT) of the watched processes into wakeups of the tree watcher.
type kqWakeups struct {
	fd     int
	c      chan struct{}
	mu     sync.Mutex
	seen   map[int]bool // guarded by mu
	once   sync.Once
	closed atomic.Bool
}

func newWakeups() wakeups {
	fd, err := unix.Kqueue()
	if err != nil {
		return noWakeups{}
	}
	w := &kqWakeups{fd: fd, c: make(chan struct{}, 1), seen: map[int]bool{}}
	go w.run()
	return w
}

func (w *kqWakeups) C() <-chan struct{} { return w.c }

func (w *kqWakeups) watch(pids []int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pid := range pids {
		if w.seen[pid] {
			continue
		}
		w.seen[pid] = true
		var ev unix.Kevent_t
		unix.SetKevent(&ev, pid, unix.EVFILT_PROC, unix.EV_ADD|unix.EV_CLEAR)
		ev.Fflags = unix.NOTE_FORK | unix.NOTE_EXEC | unix.NOTE_EXIT
		_, _ = unix.Kevent(w.fd, []unix.Kevent_t{ev}, nil, nil)
	}
}

func (w *kqWakeups) run() {
	evs := make([]unix.Kevent_t, 16)
	// A timeout, so that the goroutine sees close (closing a kqueue does
	// not wake a kevent blocked on it).
	timeout := unix.NsecToTimespec(int64(250 * time.Millisecond))
	for {
		if w.closed.Load() {
			return
		}
		n, err := unix.Kevent(w.fd, nil, evs, &timeout)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || n < 0 {
			return
		}
		if n > 0 {
			w.mu.Lock()
			for _, ev := range evs[:n] {
				if ev.Fflags&unix.NOTE_EXIT != 0 {
					delete(w.seen, int(ev.Ident))
				}
			}
			w.mu.Unlock()
			select {
			case w.c <- struct{}{}:
			default:
			}
		}
	}
}

func (w *kqWakeups) close() {
	w.once.Do(func() {
		w.closed.Store(true)
		unix.Close(w.fd)
	})
}

// viewOne is not needed here: the output's writer is not known (a pipe).
func viewOne(int, []uint64) (procView, bool) { return procView{}, false }
