//go:build darwin

package platform

import (
	"bytes"
	"fmt"
	"net"

	"github.com/portcullis/portcullis/core/control"
	"golang.org/x/sys/unix"
)

// Peer returns the uid and pid of the process at the other end of a Unix
// socket connection (control.PeerCred).
func (Peers) Peer(c net.Conn) (uid, pid int, err error) { return control.PeerCred(c) }

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
