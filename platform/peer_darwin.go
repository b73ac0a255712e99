//go:build darwin

package platform

import (
	"bytes"
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// Peer returns the uid and pid of the process at the other end of a Unix
// socket connection, from LOCAL_PEERCRED and LOCAL_PEERPID (unix(4)).
func (Peers) Peer(c net.Conn) (uid, pid int, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, 0, fmt.Errorf("peer credentials: %T is not a Unix socket", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Xucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptXucred(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERCRED)
		if serr == nil {
			pid, serr = unix.GetsockoptInt(int(fd), unix.SOL_LOCAL, unix.LOCAL_PEERPID)
		}
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("LOCAL_PEERCRED: %w", serr)
	}
	return int(cred.Uid), pid, nil
}

// Parent returns the parent of pid (kern.proc.pid) and the parent's
// executable path (kern.procargs2).
func (Peers) Parent(pid int) (ppid int, exe string, err error) {
	kp, err := unix.SysctlKinfoProc("kern.proc.pid", pid)
	if err != nil {
		return 0, "", fmt.Errorf("kern.proc.pid %d: %w", pid, err)
	}
	ppid = int(kp.Eproc.Ppid)
	exe, err = darwinExecPath(ppid)
	return ppid, exe, err
}

// darwinExecPath reads the executable path that kern.procargs2 reports: an
// int32 argc followed by the NUL-terminated exec path.
func darwinExecPath(pid int) (string, error) {
	b, err := unix.SysctlRaw("kern.procargs2", pid)
	if err != nil {
		return "", fmt.Errorf("kern.procargs2 %d: %w", pid, err)
	}
	if len(b) < 5 {
		return "", fmt.Errorf("kern.procargs2 %d: short answer", pid)
	}
	b = b[4:]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b), nil
}
