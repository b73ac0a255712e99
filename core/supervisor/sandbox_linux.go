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
// the launcher's exec is part of the launch, not a new epoch. It returns
// early if the process exits.
func waitLauncherExec(pid int, launcher string, done <-chan struct{}, max time.Duration) {
	deadline := time.Now().Add(max)
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
