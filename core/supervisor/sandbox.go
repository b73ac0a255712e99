//go:build unix

package supervisor

import (
	"errors"
	"os"
	"os/exec"
)

// Sandbox confines a server process (docs/DESIGN.md, "Processes": the
// sandbox). Package platform implements it: on Linux a user and mount
// namespace with the daemon's directories hidden under empty tmpfs mounts;
// on macOS a sandbox-exec profile.
type Sandbox interface {
	// Prepare changes cmd, not yet started (its Path resolved, Args[0]
	// as configured), so that the process it starts runs confined with
	// the paths of hide (directories, or files such as the session bus's
	// socket) hidden from it. It returns what `portcullis status` says of
	// the confinement ("standard: hides /a, /b"), or an error when this
	// system cannot confine it as asked.
	Prepare(cmd *exec.Cmd, hide []string) (string, error)
}

// ExecSignaler is a [Sandbox] whose launcher says when it exec'd the
// server: SignalExec changes cmd, already prepared, so that the launcher
// inherits w, the write end of a pipe, which it closes by its exec of the
// server (close-on-exec) or its exit. [Start] waits for the read end's end
// instead of polling the process's executable.
type ExecSignaler interface {
	SignalExec(cmd *exec.Cmd, w *os.File)
}

// ErrSandboxUnsupported is what an [UnsupportedError] is: the error of a
// sandbox's constructor when this system cannot confine servers at all
// (Linux without working user namespaces, an OS without a sandbox), as
// opposed to a broken installation. A server that did not ask for a level
// explicitly then runs unconfined ([Unconfined]), and status says why.
var ErrSandboxUnsupported = errors.New("sandbox unsupported here")

// UnsupportedError says why this system has no sandbox: its Error is the
// reason alone ("user namespaces are not available here (…)"), and it
// matches [ErrSandboxUnsupported] with errors.Is.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return e.Reason }

// Is reports whether target is ErrSandboxUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrSandboxUnsupported }

// Unconfined returns a Sandbox that confines nothing and that status
// describes as "off — why": a server whose sandbox was left at its default
// on a system that has none.
func Unconfined(why string) Sandbox { return unconfined("off — " + why) }

type unconfined string

func (u unconfined) Prepare(*exec.Cmd, []string) (string, error) { return string(u), nil }

// Cgroups puts each server process in a control group of its own, which
// [Process.Stop] kills whole when the epoch ends (docs/DESIGN.md,
// "Processes": the cgroup). Package platform implements it on Linux.
type Cgroups interface {
	// Place changes cmd, not yet started, so that its process starts
	// inside a new group for epoch. It returns the group (nil when this
	// system gives none) and what `portcullis status` says of it
	// ("/sys/fs/cgroup/…/portcullis-EPOCH, killed whole when the epoch
	// ends", "none — why").
	Place(cmd *exec.Cmd, epoch string) (Cgroup, string, error)
}

// Cgroup is one server's control group, made by [Cgroups.Place].
type Cgroup interface {
	// Started is called once the process started (or failed to):
	// the group's descriptor can be closed.
	Started()
	// Kill kills every process left in the group, waits until it is
	// empty and removes it.
	Kill() error
}
