//go:build darwin

package platform

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/identity"
)

// maxAncestry bounds the walk up a process's parents.
const maxAncestry = 256

// Ancestry returns the process at the other end of c (LOCAL_PEERPID), then
// its parent, its parent's parent… up to launchd (pid 1), from
// kern.proc.pid (parent pid, start time in microseconds since the Unix
// epoch) and kern.procargs2 (executable). As on Linux, a parent must have
// started no later than its child; a reused parent pid makes the walk
// start over.
//
// Not yet run on a Mac: this file is type-checked only.
func (ps Peers) Ancestry(c net.Conn) ([]identity.Observed, error) {
	_, pid, err := ps.Peer(c)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		chain, err := darwinWalk(pid)
		if !errors.Is(err, errRaced) {
			return chain, err
		}
	}
	return nil, fmt.Errorf("ancestry of process %d: the process tree changed while it was read, five times in a row", pid)
}

var errRaced = errors.New("the process tree changed while it was read")

func darwinProc(pid int) (identity.Observed, error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return identity.Observed{}, fmt.Errorf("kern.proc.pid %d: %w", pid, err)
	}
	if int(kp.Proc.P_pid) != pid {
		return identity.Observed{}, fmt.Errorf("kern.proc.pid %d: no such process", pid)
	}
	o := identity.Observed{
		PID:       pid,
		PPID:      int(kp.Eproc.Ppid),
		StartTime: uint64(kp.Proc.P_starttime.Sec)*1_000_000 + uint64(kp.Proc.P_starttime.Usec),
	}
	o.Exe, _ = execPath(pid)
	return o, nil
}

func darwinWalk(pid int) ([]identity.Observed, error) {
	o, err := darwinProc(pid)
	if err != nil {
		return nil, err
	}
	chain := []identity.Observed{o}
	for o.PPID > 0 {
		if len(chain) >= maxAncestry {
			return nil, fmt.Errorf("ancestry of process %d is longer than %d processes", pid, maxAncestry)
		}
		parent, err := darwinProc(o.PPID)
		if err != nil || parent.StartTime > o.StartTime {
			return nil, errRaced
		}
		o = parent
		chain = append(chain, o)
	}
	if again, err := darwinProc(pid); err != nil || again.StartTime != chain[0].StartTime {
		return nil, errRaced
	}
	return chain, nil
}

// Environ returns the value of the environment variable name that process
// pid was started with (kern.procargs2: argc, the exec path, the arguments,
// then the environment), if it still is the process that started at
// startTime. Type-checked only.
func (Peers) Environ(pid int, startTime uint64, name string) (string, bool, error) {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return "", false, fmt.Errorf("kern.procargs2 %d: %w", pid, err)
	}
	o, err := darwinProc(pid)
	if err != nil {
		return "", false, err
	}
	if o.StartTime != startTime {
		return "", false, fmt.Errorf("process %d is no longer the process that started at %d (pid reused)", pid, startTime)
	}
	if len(b) < 4 {
		return "", false, fmt.Errorf("kern.procargs2 %d: short answer", pid)
	}
	argc := int(binary.LittleEndian.Uint32(b[:4]))
	fields := bytes.Split(b[4:], []byte{0})
	// fields: the exec path, NUL padding (empty fields), argc arguments,
	// then the environment.
	i := 1
	for i < len(fields) && len(fields[i]) == 0 {
		i++
	}
	i += argc
	prefix := []byte(name + "=")
	for ; i < len(fields); i++ {
		if len(fields[i]) == 0 {
			break
		}
		if v, ok := bytes.CutPrefix(fields[i], prefix); ok {
			return string(v), true, nil
		}
	}
	return "", false, nil
}

// Adopt cannot keep orphans below the daemon on macOS, which has no child
// subreaper: a descendant that leaves a server's tree is reparented to
// launchd and is recognised only by its epoch mark (see Environ).
func (Peers) Adopt(ctx context.Context, log *slog.Logger) error {
	return errors.New("macOS has no child subreaper: processes that leave a server's tree are reparented to launchd")
}
