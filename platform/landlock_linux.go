//go:build linux

package platform

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// landlockScopeABI is the first Landlock ABI with scopes
// (LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, Linux 6.12).
const landlockScopeABI = 6

// landlockABI returns the kernel's Landlock ABI version (0: none), asked
// once.
var landlockABI = sync.OnceValue(func() int {
	v, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return 0
	}
	return int(v)
})

// landlockScopes is struct landlock_ruleset_attr as Landlock ABI 6 has it
// (a kernel that knows more fields takes this size).
type landlockScopes struct {
	handledAccessFS, handledAccessNet, scoped uint64
}

// startScoped starts cmd from the scoped starter's thread, which is in a
// Landlock domain scoping abstract Unix sockets (with no_new_privs, which
// Landlock requires): the process and everything it starts cannot
// connect to an abstract socket made outside that domain — the X server's
// @/tmp/.X11-unix/XN above all, which a shared network namespace would
// otherwise expose whatever the mounts hide.
func startScoped(cmd *exec.Cmd) error {
	reqs, err := scopedStarter()
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	reqs <- startRequest{cmd, done}
	return <-done
}

type startRequest struct {
	cmd  *exec.Cmd
	done chan<- error
}

// scopedStarter is the thread that starts sandboxed servers: made once, in
// the Landlock domain, and kept for the process's life, since a child's
// parent-death signal (bwrap --die-with-parent) follows the thread that
// started it, not the process.
var scopedStarter = sync.OnceValues(func() (chan<- startRequest, error) {
	reqs := make(chan startRequest)
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // for good: the thread carries the domain
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			ready <- fmt.Errorf("setting no_new_privs for the sandbox's Landlock domain: %w", err)
			return
		}
		attr := landlockScopes{scoped: unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET}
		fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
		if e != 0 {
			ready <- fmt.Errorf("making the sandbox's Landlock domain (abstract sockets): %w", e)
			return
		}
		_, _, e = unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0)
		unix.Close(int(fd))
		if e != 0 {
			ready <- fmt.Errorf("entering the sandbox's Landlock domain (abstract sockets): %w", e)
			return
		}
		ready <- nil
		for r := range reqs {
			r.done <- r.cmd.Start()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return reqs, nil
})
