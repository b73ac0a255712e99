//go:build linux

package supervisor

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// waitLauncherExec waits, at most max, until process pid no longer runs
// launcher (a sandbox's launcher that confines itself, then execs the
// server), so that the tree is first read once the server's own code runs:
// the launcher's exec is part of the launch, not a new epoch. With execR
// (an ExecSignaler's pipe, closed by that exec or the launcher's exit) it
// reads until its end; without, it polls the process's executable. It
// returns early if the process exits. It closes execR.
func waitLauncherExec(pid int, launcher string, execR *os.File, done <-chan struct{}, max time.Duration) {
	deadline := time.Now().Add(max)
	if execR != nil {
		defer execR.Close()
		if execR.SetReadDeadline(deadline) == nil {
			var b [1]byte
			for {
				if _, err := execR.Read(b[:]); err != nil {
					return // EOF: exec'd or exited; or the deadline
				}
			}
		}
	}
	link := "/proc/" + strconv.Itoa(pid) + "/exe"
	for time.Now().Before(deadline) {
		exe, err := os.Readlink(link)
		if err != nil || strings.TrimSuffix(exe, " (deleted)") != launcher {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}
