package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/portcullis/portcullis/app/ui"
	"github.com/portcullis/portcullis/core/authz"
)

// windowProcessArg is the hidden command that runs the window process. It
// is not for people or agents: the process it starts has no channel to
// the daemon unless the app started it (checkLinkFD).
const windowProcessArg = "window-process"

// linkFD is the file descriptor of the link in the window process (the
// first of exec.Cmd.ExtraFiles).
const linkFD = 3

// windows runs the window process and serves its link: the app (daemon
// and menu bar) runs all day without Fyne's loop, which draws at 60 Hz
// whether or not a window is shown. The window process is started ahead
// of its first window (Run) and stands by, its loop blocked, while no
// window is shown (ui.RunWindowProcess); one that ended is started again,
// ahead of time when it had run a while, else on the next request.
type windows struct {
	deps ui.LinkDeps // Daemon, Approvals, AuditStatus, ConfigState, EditFrom, Quit
	// command starts the window process, the link's end given as its first
	// extra file.
	command func() *exec.Cmd
	log     *slog.Logger
	// again is how long a window process must have run for another to be
	// started ahead of time when it ends (one that fails at once is
	// started again only on demand); restartDelay is the wait before.
	again, restartDelay time.Duration

	mu     sync.Mutex
	cur    *winSession // the running window process, nil when none
	starts int         // window processes started (tests, logs)
	closed bool        // the app quits: no new window process
}

// winSession is one window process and what waits for it.
type winSession struct {
	n       int
	conn    net.Conn
	queue   []ui.Command
	events  []authz.Event
	changed bool
	wake    chan struct{}
	exited  chan struct{}
	proc    *os.Process
}

func newWindows(deps ui.LinkDeps, command func() *exec.Cmd, log *slog.Logger) *windows {
	return &windows{deps: deps, command: command, log: log, again: time.Minute, restartDelay: time.Second}
}

// selfCommand runs this program's window process.
func selfCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe, windowProcessArg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

// Run starts the window process ahead of its first window and follows the
// daemon and the approvals until ctx ends: a request raised starts the
// window process when none runs (the approval window pops up there);
// changes and events go to the running one. At the end it closes the
// link, and the window process exits.
func (w *windows) Run(ctx context.Context) {
	changes, stopChanges := w.deps.Daemon.Changes()
	defer stopChanges()
	events, stopEvents := w.deps.Approvals.Subscribe()
	defer stopEvents()
	w.ensure()
	defer w.close()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			w.mu.Lock()
			if s := w.cur; s != nil {
				s.changed = true
				s.signal()
			}
			w.mu.Unlock()
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Kind == authz.EventRaised {
				w.ensure()
			}
			w.mu.Lock()
			if s := w.cur; s != nil {
				s.events = append(s.events, ev)
				s.signal()
			}
			w.mu.Unlock()
		}
	}
}

// Open asks the window process (started when none runs) to show c.
func (w *windows) Open(c ui.Command) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.startLocked()
	if s == nil {
		return
	}
	s.queue = append(s.queue, c)
	s.signal()
}

// ensure starts the window process when none runs.
func (w *windows) ensure() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.startLocked()
}

// close ends the link of the running window process (the app quits).
func (w *windows) close() {
	w.mu.Lock()
	w.closed = true
	s := w.cur
	w.cur = nil
	w.mu.Unlock()
	if s != nil {
		_ = s.conn.Close() // the window process ends with its link
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			w.log.Warn("the window process did not end with its link; killing it", "pid", s.proc.Pid)
			_ = s.proc.Kill()
			<-s.exited
		}
	}
}

// Running reports whether a window process runs, and how many were
// started so far.
func (w *windows) Running() (running bool, starts int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur != nil, w.starts
}

func (s *winSession) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// startLocked starts a window process when none runs and returns the
// running one (nil when it cannot start).
func (w *windows) startLocked() *winSession {
	if w.cur != nil || w.closed {
		return w.cur
	}
	s, err := w.spawn()
	if err != nil {
		w.log.Error("the window process did not start: approvals wait for `portcullis approvals` and `portcullis approve`", "err", err)
		return nil
	}
	w.cur = s
	return s
}

// spawn starts a window process with a new link: a socket pair whose one
// end only the child holds.
func (w *windows) spawn() (*winSession, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("making the window link: %w", err)
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	ours, theirs := os.NewFile(uintptr(fds[0]), "window link"), os.NewFile(uintptr(fds[1]), "window link (child)")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("making the window link: %w", err)
	}
	cmd := w.command()
	cmd.ExtraFiles = []*os.File{theirs}
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, err
	}
	w.starts++
	started := time.Now()
	s := &winSession{n: w.starts, conn: conn, wake: make(chan struct{}, 1), exited: make(chan struct{}), proc: cmd.Process}
	w.log.Info("window process started", "pid", cmd.Process.Pid, "n", s.n)
	deps := w.deps
	deps.Next = func(closed <-chan struct{}) ui.Batch { return w.next(s, closed) }
	go ui.ServeLink(conn, deps)
	go func() {
		err := cmd.Wait()
		conn.Close()
		w.mu.Lock()
		if w.cur == s {
			w.cur = nil
		}
		pending := len(w.deps.Approvals.Pending()) > 0 && !w.closed
		w.mu.Unlock()
		if err != nil {
			w.log.Warn("window process ended", "pid", cmd.Process.Pid, "err", err)
		} else {
			w.log.Info("window process ended", "pid", cmd.Process.Pid)
		}
		close(s.exited)
		if time.Since(started) < w.again {
			if pending {
				// It failed with a request waiting: the next request or
				// menu click starts another; say so once here.
				w.log.Warn("an approval request waits without a window: decide it with `portcullis approvals` and `portcullis approve`")
			}
			return
		}
		// It ran a while (killed, or its display went away): the next
		// one is started ahead of its window again.
		time.Sleep(w.restartDelay)
		w.ensure()
	}()
	return s, nil
}

// next waits until something is there for window process s, or its link
// ended.
func (w *windows) next(s *winSession, closed <-chan struct{}) ui.Batch {
	for {
		w.mu.Lock()
		if len(s.queue) > 0 || len(s.events) > 0 || s.changed {
			b := ui.Batch{Changed: s.changed, Events: s.events, Commands: s.queue}
			s.queue, s.events, s.changed = nil, nil, false
			w.mu.Unlock()
			return b
		}
		w.mu.Unlock()
		select {
		case <-s.wake:
		case <-closed:
			return ui.Batch{}
		}
	}
}

// errNoLink is the window process started without the app's link.
var errNoLink = errors.New("the window process shows Portcullis's windows for the running app, which starts it itself; run `portcullis` for the app")

// linkConn returns the link the app gave this window process on linkFD,
// after checking that the app (this process's parent) made it.
func linkConn() (io.ReadWriteCloser, error) {
	f := os.NewFile(linkFD, "window link")
	if f == nil {
		return nil, errNoLink
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%w (%v)", errNoLink, err)
	}
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		conn.Close()
		return nil, fmt.Errorf("%w (file descriptor %d is not a Unix socket)", errNoLink, linkFD)
	}
	if err := checkLinkPeer(uc); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w (%v)", errNoLink, err)
	}
	return conn, nil
}
