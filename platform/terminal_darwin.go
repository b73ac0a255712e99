//go:build darwin

package platform

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AtTerminal reports whether process pid, if it still is the process that
// started at startTime, has a controlling terminal (kern.proc.pid,
// e_tdev). macOS offers no pure-Go way to read another process's
// descriptors (proc_pidfdinfo is in libproc), so this is weaker than the
// check on Linux, which looks at the process's stdin and stdout
// themselves: a process with a terminal whose stdio is a pipe passes.
//
// Not yet run on a Mac: this file is type-checked only.
func (Peers) AtTerminal(pid int, startTime uint64) (bool, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return false, fmt.Errorf("kern.proc.pid %d: %w", pid, err)
	}
	if int(kp.Proc.P_pid) != pid {
		return false, fmt.Errorf("kern.proc.pid %d: no such process", pid)
	}
	if st := uint64(kp.Proc.P_starttime.Sec)*1_000_000 + uint64(kp.Proc.P_starttime.Usec); st != startTime {
		return false, fmt.Errorf("process %d is no longer the process that started at %d (pid reused)", pid, startTime)
	}
	return kp.Eproc.Tdev != -1, nil // NODEV: no controlling terminal
}
