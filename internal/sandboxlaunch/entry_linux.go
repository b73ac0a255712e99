//go:build linux

package sandboxlaunch

import (
	"fmt"
	"syscall"
)

// Why the launcher makes its own namespaces. Go's os/exec gives up vfork
// when CLONE_NEWUSER is asked for (the parent must write the child's uid
// and gid maps while the child waits), so a daemon that clones the
// launcher into new namespaces copies its own page tables on every
// sandboxed start and then takes a write fault on each page it touches:
// on this project's VMs that was 8 ms of the start and about as much of
// the daemon's work just after it (docs/BENCHMARKS.md, "The launcher
// makes its own namespaces"). unshare(CLONE_NEWUSER) needs a process of
// one thread, which a Go program is not once its runtime has started; so
// on linux/amd64 the launcher's entry point (entry_linux_amd64.s, linked
// with -ldflags=-E=EntrySymbol) does the unshare and writes the maps
// before the runtime starts, and the daemon starts the launcher like any
// other program. A launcher built without that entry point says so
// (ExitNoEntry) and the daemon clones it into the namespaces as before.

// What the entry point did, written before the runtime started (so these
// must never get an initializer, which would overwrite them): entryRan is
// 1 when it ran at all, entryStep the step that failed, with entryErrno,
// or entryStepDone.
var entryRan, entryStep, entryErrno int64

// What the entry point's fast path did (it runs after entryStepDone):
// fastStage is the stage at which it gave way to the Go code (0 when it
// did not run), fastExecErrno the error of the server's execve when that
// was what failed. The fast path is the whole launch of Main, made before
// the runtime starts, since a Go runtime's start is most of what a
// sandboxed start costs (docs/BENCHMARKS.md, "A launcher without the Go
// runtime"): the exec-fd, the hidden paths (tmpfs, the note, read-only;
// /dev/null over a file), the capabilities, the server's execve. It gives
// way to Main, which does the launch from the start, at anything it does
// not expect or that Main must refuse with its own words (a working
// directory or executable inside a hidden directory, a refused mount):
// nothing it did before that harms Main's doing it again.
//
//lint:ignore U1000 written by the entry point (entry_linux_amd64.s)
var fastStage, fastExecErrno int64

// The note's name and text after the directory's path, for the fast path
// (statically initialized, so readable before the runtime starts).
var (
	//lint:ignore U1000 read by the entry point (entry_linux_amd64.s)
	noteName = "/" + HiddenNote
	//lint:ignore U1000 read by the entry point (entry_linux_amd64.s)
	noteTail = hiddenTail
)

// The entry point's steps.
const (
	entryStepUnshare   = 1
	entryStepSetgroups = 2
	entryStepUidMap    = 3
	entryStepGidMap    = 4
	entryStepDone      = 9
)

// entered reports whether the entry point put the process in the
// namespaces its first argument asked for.
func entered() error {
	if entryRan == 0 {
		return ErrNoEntry
	}
	if entryStep == entryStepDone {
		return nil
	}
	what := map[int64]string{
		entryStepUnshare:   "create its user and mount namespaces",
		entryStepSetgroups: "deny setgroups in its user namespace",
		entryStepUidMap:    "map the person's uid in its user namespace",
		entryStepGidMap:    "map the person's gid in its user namespace",
	}[entryStep]
	if what == "" {
		what = fmt.Sprintf("enter its namespaces (step %d)", entryStep)
	}
	errno := syscall.Errno(entryErrno)
	if entryStep == entryStepUnshare {
		return refused(what, errno) // EPERM here: AppArmor or seccomp
	}
	return fmt.Errorf("the sandbox could not %s (%v); the server was not started: set its sandbox to off (portcullis servers edit LABEL --sandbox off)", what, errno)
}
