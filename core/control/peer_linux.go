//go:build linux

package control

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerCred returns the uid and pid of the process at the other end of the
// Unix socket connection c, from SO_PEERCRED (unix(7): the credentials it
// had when it called connect or listen). It is the one peer lookup of the
// program: the shim's check of the daemon (checkPeer) and the daemon's
// of each agent (platform.Peers) both use it.
func PeerCred(c net.Conn) (uid, pid int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, 0, fmt.Errorf("peer credentials: %T is not a Unix socket", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, 0, err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, err
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return int(cred.Uid), int(cred.Pid), nil
}
