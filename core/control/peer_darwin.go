//go:build darwin

package control

import (
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// PeerCred returns the uid and pid of the process at the other end of the
// Unix socket connection c, from LOCAL_PEERCRED and LOCAL_PEERPID
// (unix(4)). It is the one peer lookup of the program: the shim's check of
// the daemon (checkPeer) and the daemon's of each agent (platform.Peers)
// both use it.
func PeerCred(c net.Conn) (uid, pid int, err error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, 0, fmt.Errorf("peer credentials: %T is not a Unix socket", c)
	}
	raw, err := sc.SyscallConn()
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
