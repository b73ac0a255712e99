package control

import "golang.org/x/sys/unix"

// recvFlags makes the kernel set close-on-exec on received descriptors
// itself; ReceiveStdio also sets it under syscall.ForkLock.
const recvFlags = unix.MSG_CMSG_CLOEXEC

// ioctlGetTermios is the request that reads a terminal's attributes.
const ioctlGetTermios = unix.TCGETS
