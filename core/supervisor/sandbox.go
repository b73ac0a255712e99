//go:build unix

package supervisor

import (
	"errors"
	"os/exec"
)

// Sandbox confines a server process (docs/DESIGN.md, "Processes": the
// sandbox). Package platform implements it: on Linux bubblewrap (bwrap)
// with new user, mount, PID, IPC and UTS namespaces; on macOS a
// sandbox-exec profile.
type Sandbox interface {
	// Prepare changes cmd, not yet started (its Path resolved, Args[0]
	// as configured, Dir and Env set), so that the process it starts runs
	// confined as c says. It returns what `portcullis status` says of the
	// confinement ("standard: hides /a, /b; writes /w"), or an error when
	// this system cannot confine it as asked.
	Prepare(cmd *exec.Cmd, c Confinement) (string, error)
}

// Starter is a [Sandbox] that starts the command it prepared itself, to
// confine it in ways an exec.Cmd cannot say (on Linux, a Landlock domain
// the process inherits from the thread that starts it). Start is
// cmd.Start with that confinement, or an error when it cannot be had.
type Starter interface {
	Start(cmd *exec.Cmd) error
}

// Confinement is what a [Sandbox] does to one server: Hide lists the paths
// (directories, or files such as the session bus's socket) it must not see
// at all, Write the paths it may write besides its working directory,
// /tmp and its runtime's caches (the configuration's write paths).
type Confinement struct {
	Hide  []string
	Write []string
}

// Nested is a [Sandbox] whose launcher stays: the process [Start] starts
// runs Launcher (bubblewrap's monitor) for the server's whole life, and
// the server is a descendant of it, below other processes running the
// same file (bubblewrap's init, pid 1 of the server's PID namespace).
// [Start] waits until that descendant exec'd the server, then reads the
// tree, the executable and the start time from it ([Process.Pid]); the
// launcher's process stays the process group that Stop ends.
type Nested interface {
	Launcher() string
}

// ErrSandboxUnsupported is what an [UnsupportedError] is: the error of a
// sandbox's constructor when this system cannot confine servers at all
// (Linux without bubblewrap or where it is refused, an OS without a
// sandbox). A server that did not ask for a level
// explicitly then runs unconfined ([Unconfined]), and status says why.
var ErrSandboxUnsupported = errors.New("sandbox unsupported here")

// UnsupportedError says why this system has no sandbox: its Error is the
// reason alone ("bubblewrap (bwrap) … is not installed here …"), and it
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

func (u unconfined) Prepare(*exec.Cmd, Confinement) (string, error) { return string(u), nil }

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
