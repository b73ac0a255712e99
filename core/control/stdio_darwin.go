package control

import "golang.org/x/sys/unix"

// recvFlags: macOS has no MSG_CMSG_CLOEXEC; ReceiveStdio sets close-on-exec
// under syscall.ForkLock.
const recvFlags = 0

// ioctlGetTermios is the request that reads a terminal's attributes.
const ioctlGetTermios = unix.TIOCGETA
