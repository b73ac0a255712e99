//go:build linux

package platform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// maxAncestry bounds the walk up a process's parents; a chain longer than
// this is refused as unreadable rather than followed for ever.
const maxAncestry = 256

// Ancestry returns the process at the other end of c (from SO_PEERCRED),
// then its parent, its parent's parent… up to pid 1 or the first process
// whose parent is pid 0, each with its executable and the kernel's start
// time (/proc/PID/stat field 22, clock ticks since boot).
//
// A pid is not an identity, so the walk checks start times: a parent must
// have started no later than its child; a parent pid that names a younger
// process (the real parent died and its pid was reused) or no process, or a
// child whose start time changed under the walk, makes the walk start over
// (a few times, then an error). Where the kernel offers it (Linux 6.5,
// SO_PEERPIDFD) the peer itself is pinned by a pidfd: the walk counts only
// when the peer is still alive at its end, so its pid cannot have been
// reused for another process meanwhile.
func (Peers) Ancestry(c net.Conn) ([]identity.Observed, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, fmt.Errorf("peer ancestry: %T is not a Unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	pidfd := -1
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if serr == nil {
			if n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
				pidfd = n
			}
		}
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	chain, err := procAncestry("/proc", int(cred.Pid))
	if err != nil {
		return nil, err
	}
	if pidfd >= 0 {
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return nil, fmt.Errorf("process %d exited while its ancestry was read: %w", cred.Pid, err)
		}
	}
	return chain, nil
}

// Environ returns the value of the environment variable name in the
// environment process pid was started with (/proc/PID/environ), if it
// still is the process that started at startTime. ok is false when the
// variable is not set.
func (Peers) Environ(pid int, startTime uint64, name string) (value string, ok bool, err error) {
	return procEnviron("/proc", pid, startTime, name)
}

func procEnviron(root string, pid int, startTime uint64, name string) (string, bool, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/environ", root, pid))
	if err != nil {
		return "", false, fmt.Errorf("environment of process %d: %w", pid, err)
	}
	st, err := (procfs{root: root}).readStat(pid)
	if err != nil {
		return "", false, fmt.Errorf("process %d: %w", pid, err)
	}
	if st.startTime != startTime {
		return "", false, fmt.Errorf("process %d is no longer the process that started at %d (pid reused)", pid, startTime)
	}
	prefix := []byte(name + "=")
	for _, kv := range bytes.Split(b, []byte{0}) {
		if v, found := bytes.CutPrefix(kv, prefix); found {
			return string(v), true, nil
		}
	}
	return "", false, nil
}

// errRaced says the process tree changed under one walk.
var errRaced = errors.New("the process tree changed while it was read")

// procAncestry walks from pid up to the root under a /proc at root.
func procAncestry(root string, pid int) ([]identity.Observed, error) {
	p := procfs{root: root}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		var chain []identity.Observed
		chain, err = p.walk(pid)
		if !errors.Is(err, errRaced) {
			return chain, err
		}
	}
	return nil, fmt.Errorf("ancestry of process %d: %w five times in a row", pid, err)
}

func (p procfs) walk(pid int) ([]identity.Observed, error) {
	st, err := p.readStat(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	chain := []identity.Observed{p.observed(st)}
	for st.ppid > 0 {
		if len(chain) >= maxAncestry {
			return nil, fmt.Errorf("ancestry of process %d is longer than %d processes", pid, maxAncestry)
		}
		parent, err := p.readStat(st.ppid)
		if err == nil && parent.startTime > st.startTime {
			err = errRaced // a younger process holds the parent's pid: it was reused
		}
		if err != nil {
			// The parent ended (or its pid was reused): the child has a
			// new parent by now. Read the child again; a child that
			// changed or ended too starts the walk over.
			again, cerr := p.readStat(st.pid)
			if cerr != nil || again.startTime != st.startTime || again.ppid == st.ppid {
				return nil, errRaced
			}
			st = again
			chain[len(chain)-1] = p.observed(st)
			continue
		}
		st = parent
		chain = append(chain, p.observed(st))
	}
	// The walk read each process once; a child reparented after it was
	// read still had, when read, the parent that follows it. Check that
	// the peer itself did not change while its parents were read.
	if again, err := p.readStat(pid); err != nil || again.startTime != chain[0].StartTime {
		return nil, errRaced
	}
	return chain, nil
}

// Adopt makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER,
// Linux 3.4): a process below it whose parent exits (a double fork, a
// setsid'd grandchild of a server) is reparented to it rather than to init,
// so that it stays below the daemon in the kernel's process tree.
//
// Adopted orphans are this process's children and must be reaped by it,
// without taking the exit status of the children that os/exec started and
// waits for: Go holds a pidfd (clone CLONE_PIDFD) for each child it
// started until Wait, so a zombie child for which this process holds no
// pidfd is an adopted one, reaped here, at each SIGCHLD, until ctx ends.
// Where Go cannot use pidfds (kernels before 5.4) a zombie is reaped only
// after it stayed unreaped for 30 s.
func (Peers) Adopt(ctx context.Context, log *slog.Logger) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &reaper{root: "/proc", self: os.Getpid(), log: log, seen: map[procKey]time.Time{}}
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err == nil {
		unix.Close(fd)
		r.pidfds = true
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	go func() {
		defer signal.Stop(sig)
		// SIGCHLD is enough: a child that exits while the zombies are read
		// raises a new one, which waits in sig's buffer. Only without
		// pidfds is a zombie left for zombieGrace and looked at again
		// later, with no signal to say when.
		var again <-chan time.Time
		if !r.pidfds {
			tick := time.NewTicker(10 * time.Second)
			defer tick.Stop()
			again = tick.C
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
			case <-again:
			}
			r.reap()
		}
	}()
	return nil
}

// procKey names one process across pid reuse.
type procKey struct {
	pid   int
	start uint64
}

// reaper reaps the zombies among this process's adopted children.
type reaper struct {
	root   string
	self   int
	pidfds bool // Go starts children with pidfds (see Adopt)
	log    *slog.Logger
	seen   map[procKey]time.Time // zombie children not reaped yet, when first seen
}

// zombieGrace is how long a zombie child stays unreaped before it is taken
// for an adopted one when Go cannot use pidfds.
const zombieGrace = 30 * time.Second

func (r *reaper) reap() {
	zombies := r.zombieChildren()
	if len(zombies) == 0 {
		clear(r.seen)
		return
	}
	held := r.heldPidfds()
	now := time.Now()
	live := map[procKey]bool{}
	for _, z := range zombies {
		live[z] = true
		if held[z.pid] {
			continue // os/exec will Wait for it
		}
		if !r.pidfds {
			first, ok := r.seen[z]
			if !ok {
				r.seen[z] = now
				continue
			}
			if now.Sub(first) < zombieGrace {
				continue
			}
		}
		var ws unix.WaitStatus
		if got, err := unix.Wait4(z.pid, &ws, unix.WNOHANG, nil); err == nil && got == z.pid {
			r.log.Debug("reaped an adopted orphan", "pid", z.pid, "status", int(ws))
		}
		delete(live, z)
	}
	for k := range r.seen {
		if !live[k] {
			delete(r.seen, k)
		}
	}
}

// zombieChildren lists the children of this process that have exited and
// are not reaped yet: its threads' children files (Linux 3.5,
// CONFIG_PROC_CHILDREN) name them, else every process is read.
func (r *reaper) zombieChildren() []procKey {
	pids, ok := r.children()
	if !ok {
		entries, err := os.ReadDir(r.root)
		if err != nil {
			return nil
		}
		for _, e := range entries {
			if pid, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	p := procfs{root: r.root}
	var out []procKey
	for _, pid := range pids {
		st, err := p.readStat(pid)
		if err != nil || st.ppid != r.self || st.state != 'Z' {
			continue
		}
		out = append(out, procKey{pid: pid, start: st.startTime})
	}
	return out
}

// children lists this process's children from /proc/self/task/*/children;
// ok is false where the kernel has no such file.
func (r *reaper) children() (pids []int, ok bool) {
	dir := fmt.Sprintf("%s/%d/task", r.root, r.self)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			if os.IsNotExist(err) {
				return nil, false
			}
			continue // a thread that ended meanwhile
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	return pids, true
}

// heldPidfds returns the pids that this process holds a pidfd for
// (/proc/self/fd links to anon_inode:[pidfd], whose fdinfo names the pid).
func (r *reaper) heldPidfds() map[int]bool {
	dir := fmt.Sprintf("%s/%d/fd", r.root, r.self)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[int]bool{}
	for _, e := range entries {
		link, err := os.Readlink(dir + "/" + e.Name())
		if err != nil || link != "anon_inode:[pidfd]" {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("%s/%d/fdinfo/%s", r.root, r.self, e.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
					out[pid] = true
				}
			}
		}
	}
	return out
}
