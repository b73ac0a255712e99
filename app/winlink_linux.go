package app

import (
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// checkLinkPeer checks that this process's parent made the socket pair of
// the link: SO_PEERCRED of a socket pair names the process that created
// it. A window process started by anything but the app (an agent running
// the hidden command) has no link to the app's daemon.
func checkLinkPeer(c *net.UnixConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return err
	}
	if credErr != nil {
		return credErr
	}
	if int(cred.Pid) != os.Getppid() || int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("its socket was made by process %d, not by this process's parent %d", cred.Pid, os.Getppid())
	}
	return nil
}
