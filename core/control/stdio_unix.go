//go:build linux || darwin

package control

import (
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// StdioKind returns nil when f can be handed to the daemon as the agent's
// stdin or stdout: a pipe (or FIFO) or a stream socket (Node gives its
// children socketpairs). A terminal, another character device (/dev/null),
// a regular file, a directory or a datagram socket cannot: the error,
// wrapping ErrNoStdio, says which it is, and the shim relays.
func StdioKind(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoStdio, err)
	}
	var kerr error
	if err := rc.Control(func(fd uintptr) { kerr = stdioKind(int(fd)) }); err != nil {
		return fmt.Errorf("%w: %v", ErrNoStdio, err)
	}
	return kerr
}

func stdioKind(fd int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("%w: fstat: %v", ErrNoStdio, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return nil
	case unix.S_IFSOCK:
		typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
		if err != nil {
			return fmt.Errorf("%w: reading the socket's type: %v", ErrNoStdio, err)
		}
		if typ != unix.SOCK_STREAM {
			return fmt.Errorf("%w: a socket that is not a stream", ErrNoStdio)
		}
		return nil
	case unix.S_IFCHR:
		if _, err := unix.IoctlGetTermios(fd, ioctlGetTermios); err == nil {
			return fmt.Errorf("%w: a terminal", ErrNoStdio)
		}
		return fmt.Errorf("%w: a character device (such as /dev/null)", ErrNoStdio)
	case unix.S_IFREG:
		return fmt.Errorf("%w: a regular file", ErrNoStdio)
	case unix.S_IFDIR:
		return fmt.Errorf("%w: a directory", ErrNoStdio)
	}
	return fmt.Errorf("%w: neither a pipe nor a socket (mode %#o)", ErrNoStdio, st.Mode&unix.S_IFMT)
}

// SendStdio hands in and out (the agent's stdin and stdout) to the daemon
// over c, a Unix socket, as one byte with both descriptors attached
// (SCM_RIGHTS). The descriptors stay open here: the shim closes them once
// the daemon's Handoff says ModeFD.
func SendStdio(c net.Conn, in, out *os.File) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: %T is not a Unix socket", ErrNoStdio, c)
	}
	inRC, err := in.SyscallConn()
	if err != nil {
		return err
	}
	outRC, err := out.SyscallConn()
	if err != nil {
		return err
	}
	// Control, not Fd: Fd would put a nonblocking descriptor in blocking
	// mode, and both stay valid while the message is sent.
	var werr error
	cerr := inRC.Control(func(ifd uintptr) {
		if err := outRC.Control(func(ofd uintptr) {
			_, _, werr = uc.WriteMsgUnix([]byte{handoffFD}, unix.UnixRights(int(ifd), int(ofd)), nil)
		}); err != nil {
			werr = err
		}
	})
	if cerr != nil {
		return cerr
	}
	return werr
}

// ReceiveStdio reads the shim's hand-off message from c (the daemon's side
// of a connect whose Reply asked for the agent's stdio; nothing may have
// been read from c since). For the descriptors it returns the agent's
// stdin and stdout as nonblocking files in the runtime's poller, so that a
// read or a write ends when the file is closed or its deadline passes.
// Both are close-on-exec from the moment they exist in this process (no
// server launched meanwhile can inherit them). Errors: one wrapping
// ErrNoStdio when the shim relays (SendRelay) or sent descriptors that are
// not a pipe or stream socket each (then closed), with the reason; another
// when reading failed (the shim is gone, or c's read deadline passed).
func ReceiveStdio(c net.Conn) (in, out *os.File, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %T is not a Unix socket", ErrNoStdio, c)
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return nil, nil, err
	}
	var (
		b     [1]byte
		oob   = make([]byte, unix.CmsgSpace(4*4)) // room for more than two: extras are closed
		n     int
		oobn  int
		flags int
		rerr  error
		fds   []int
	)
	err = rc.Read(func(fd uintptr) bool {
		// A server started between recvmsg and FD_CLOEXEC would inherit
		// the agent's descriptors and could write to the agent past the
		// gateway: forks wait for the lock (as for accept in package net).
		syscall.ForkLock.RLock()
		defer syscall.ForkLock.RUnlock()
		n, oobn, flags, _, rerr = unix.Recvmsg(int(fd), b[:], oob, recvFlags)
		if rerr == unix.EAGAIN || rerr == unix.EINTR {
			return false
		}
		if rerr == nil && oobn > 0 {
			fds = rights(oob[:oobn])
			for _, f := range fds {
				unix.CloseOnExec(f)
			}
		}
		return true
	})
	if err == nil {
		err = rerr
	}
	closeAll := func() {
		for _, f := range fds {
			unix.Close(f)
		}
	}
	switch {
	case err != nil:
		closeAll()
		return nil, nil, fmt.Errorf("reading the shim's hand-off: %w", err)
	case n == 0:
		closeAll()
		return nil, nil, fmt.Errorf("reading the shim's hand-off: the shim closed the connection")
	case b[0] == handoffRelay:
		closeAll()
		return nil, nil, fmt.Errorf("%w: the shim relays", ErrNoStdio)
	case b[0] != handoffFD:
		closeAll()
		return nil, nil, fmt.Errorf("the shim's hand-off is not valid: byte %#x", b[0])
	case flags&unix.MSG_CTRUNC != 0 || len(fds) != 2:
		closeAll()
		return nil, nil, fmt.Errorf("%w: the shim's hand-off carried %d descriptors, not its stdin and stdout", ErrNoStdio, len(fds))
	}
	for i, what := range [2]string{"stdin", "stdout"} {
		if err := stdioKind(fds[i]); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("the agent's %s: %w", what, err)
		}
	}
	for _, f := range fds {
		if err := unix.SetNonblock(f, true); err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("%w: making the agent's stdio nonblocking: %v", ErrNoStdio, err)
		}
	}
	// Nonblocking descriptors go into the poller (os.NewFile).
	return os.NewFile(uintptr(fds[0]), "agent stdin"), os.NewFile(uintptr(fds[1]), "agent stdout"), nil
}

// rights returns every descriptor in the SCM_RIGHTS messages of oob.
func rights(oob []byte) []int {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			continue
		}
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds
}
