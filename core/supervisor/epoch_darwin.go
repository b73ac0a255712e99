//go:build darwin

package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// darwinZombie is p_stat of a zombie (<sys/proc.h> SZOMB).
const darwinZombie = 5

// findMarked lists the live processes of this user (kern.proc.uid), other
// than this one, whose environment as kern.procargs2 returns it holds the
// mark of one of epochs. Processes whose arguments the kernel does not show
// (another user's, or protected ones) are not looked at.
func findMarked(epochs map[string]bool) ([]marked, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.uid", os.Getuid())
	if err != nil {
		return nil, fmt.Errorf("looking for processes of the epoch: %w", err)
	}
	self := os.Getpid()
	var out []marked
	for i := range procs {
		kp := &procs[i]
		pid := int(kp.Proc.P_pid)
		if pid <= 0 || pid == self || kp.Proc.P_stat == darwinZombie {
			continue
		}
		b, err := unix.SysctlRaw("kern.procargs2", pid)
		if err != nil {
			continue
		}
		exe, env, ok := parseProcargs2(b)
		if !ok {
			continue
		}
		epoch, ok := envHas(env, epochs)
		if !ok {
			continue
		}
		out = append(out, marked{pid: pid, pgid: int(kp.Eproc.Pgid), start: startOf(kp), exe: exe, epoch: epoch})
	}
	return out, nil
}

// startOf is a process's start time in microseconds since the Unix epoch.
func startOf(kp *unix.KinfoProc) uint64 {
	return uint64(kp.Proc.P_starttime.Sec)*1_000_000 + uint64(kp.Proc.P_starttime.Usec)
}

// startTimeOf returns the kernel's start time of pid, in the unit the
// tree scan records (startOf).
func startTimeOf(pid int) (uint64, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, err
	}
	return startOf(kp), nil
}

// signalMarked sends sig to m right after checking that its pid still names
// the process found (same start time); a process that is gone is not an
// error. macOS has no pidfd, so a pid reused in between is not ruled out.
func signalMarked(m marked, sig syscall.Signal) error {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", m.pid)
	if err != nil || kp.Proc.P_pid != int32(m.pid) || startOf(kp) != m.start {
		return nil
	}
	if err := syscall.Kill(m.pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
