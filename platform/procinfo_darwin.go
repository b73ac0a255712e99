//go:build darwin

package platform

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// NewProcessInfo returns the kernel's view of processes through sysctl, in
// pure Go: kern.procargs2 for a process's executable path and
// kern.proc.all for parent pids and start times (microseconds since the Unix
// epoch).
func NewProcessInfo() identity.ProcessInfo { return sysctlInfo{} }

type sysctlInfo struct{}

var _ identity.ProcessInfo = sysctlInfo{}

// szomb is p_stat of a zombie (<sys/proc.h> SZOMB).
const szomb = 5

// Tree returns pid and its live descendants breadth-first (children in pid
// order), zombies left out. A missing pid gives an error wrapping
// fs.ErrNotExist.
func (sysctlInfo) Tree(pid int) ([]identity.Observed, error) {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.all")
	if err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	children := make(map[int][]identity.Observed)
	var root *identity.Observed
	for i := range procs {
		kp := &procs[i]
		o := identity.Observed{
			PID:       int(kp.Proc.P_pid),
			PPID:      int(kp.Eproc.Ppid),
			StartTime: uint64(kp.Proc.P_starttime.Sec)*1_000_000 + uint64(kp.Proc.P_starttime.Usec),
		}
		if o.PID == pid {
			root = &o
			continue
		}
		if kp.Proc.P_stat == szomb {
			continue
		}
		children[o.PPID] = append(children[o.PPID], o)
	}
	if root == nil {
		return nil, fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
	}
	out := []identity.Observed{*root}
	for i := 0; i < len(out); i++ {
		out[i].Exe, _ = execPath(out[i].PID)
		kids := children[out[i].PID]
		slices.SortFunc(kids, func(a, b identity.Observed) int { return a.PID - b.PID })
		out = append(out, kids...)
	}
	return out, nil
}

// OpenExecutable opens the path the kernel recorded at exec time. Unlike
// Linux /proc/PID/exe this opens by path, so it cannot see a file that was
// replaced on disk after launch: it reads the new file (the code-signing
// cdhash would be needed to tell them apart).
func (sysctlInfo) OpenExecutable(pid int) (io.ReadCloser, error) {
	p, err := execPath(pid)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("process %d executable: %w", pid, err)
	}
	return f, nil
}

// execPath returns the executable path from kern.procargs2: a 4-byte argc,
// then the NUL-terminated exec path, then padding and the arguments.
func execPath(pid int) (string, error) {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EINVAL) {
			return "", fmt.Errorf("process %d: %w", pid, fs.ErrNotExist)
		}
		return "", fmt.Errorf("process %d: kern.procargs2: %w", pid, err)
	}
	if len(b) < 5 {
		return "", fmt.Errorf("process %d: kern.procargs2: short answer", pid)
	}
	b = b[4:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return "", fmt.Errorf("process %d: kern.procargs2: empty exec path", pid)
	}
	return string(b), nil
}
