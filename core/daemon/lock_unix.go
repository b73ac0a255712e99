//go:build unix

package daemon

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/portcullis/portcullis/core/paths"
)

// Lock is a daemon's hold on its state directory: one daemon per audit log,
// catalog store and configuration, whatever socket a caller's environment
// would look for it at.
type Lock struct {
	f *os.File
}

// TakeLock locks dirs' state directory for this daemon, before anything
// else reads the audit key or the configuration: a second daemon stops here
// with an error wrapping [ErrRunning] that names the first (its pid and
// socket), never with a later failure that would name a wrong cause.
func TakeLock(dirs paths.Dirs) (*Lock, error) {
	if err := os.MkdirAll(dirs.State, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dirs.State, err)
	}
	file := dirs.LockFile()
	f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the daemon's lock %s: %w", file, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking %s: %w", file, err)
		}
		return nil, runningError(dirs, paths.ReadHolder(dirs))
	}
	if err := f.Truncate(0); err == nil {
		_, _ = fmt.Fprintf(f, "pid %d\nsocket %s\n", os.Getpid(), dirs.Socket())
		_ = f.Sync()
	}
	return &Lock{f: f}, nil
}

// runningError words a second daemon's refusal to start.
func runningError(dirs paths.Dirs, h paths.Holder) error {
	who := "another daemon"
	if h.PID > 0 {
		who = fmt.Sprintf("daemon pid %d", h.PID)
	}
	where := ""
	switch {
	case h.Socket != "" && h.Socket != dirs.Socket():
		where = fmt.Sprintf("; it listens on %s, not on %s where this one would: a different environment (PORTCULLIS_HOME) or version found another place — `portcullis doctor` says which daemon an environment reaches", h.Socket, dirs.Socket())
	case h.Socket != "":
		where = "; it listens on " + h.Socket
	}
	return fmt.Errorf("%w: %s holds %s%s. Not starting a second one: use the running daemon, or stop it first with `portcullis stop`", ErrRunning, who, dirs.State, where)
}

// Held reports whether a daemon holds dirs' lock now, and what it says.
func Held(dirs paths.Dirs) (paths.Holder, bool) {
	f, err := os.Open(dirs.LockFile())
	if err != nil {
		return paths.Holder{}, false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return paths.Holder{}, false
	}
	return paths.ReadHolder(dirs), true
}

// Release ends the hold; the file stays.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}
