//go:build linux

package supervisor

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// The server's stdout on Linux is a Unix stream socket, not a pipe, so that
// the daemon knows which process wrote each byte it reads (docs/DESIGN.md
// "Who answered"). With SO_PASSCRED set on the daemon's end the kernel
// stamps every write with its writer's process (its thread group), and a
// read never returns the bytes of two writers together
// (net/unix/af_unix.c: unix_stream_read_generic stops at a change of
// credentials). SO_PASSPIDFD (Linux 6.5) also hands over a pidfd of the
// writer, which stays bound to that process even after it exits and its
// pid is reused. A server sees an ordinary stream on fd 1 (write, fsync,
// SIGPIPE when the daemon is gone); only open("/dev/stdout") differs: a
// socket cannot be opened by path (ENXIO).

// stdoutPipe is the daemon's end of the server's stdout; reads after close
// report io.EOF. attribute, when set, is called with each chunk's writer
// before the chunk is returned (pid 0: unknown; pidfd -1: none); it may
// block.
type stdoutPipe struct {
	f         *os.File
	rc        syscall.RawConn
	oob       []byte
	attribute func(pid, pidfd int)
	once      sync.Once
	closed    atomic.Bool
}

// attributed: this platform tells the writer of each chunk.
const attributed = true

// newStdout returns the daemon's end and the server's end of its stdout.
func newStdout() (*stdoutPipe, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSCRED, 1); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	// Before 6.5 the option does not exist: the pid alone is used.
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_PASSPIDFD, 1)
	// Nothing goes back to the server on its stdout: its reads of fd 1
	// see the end of the stream.
	_ = unix.Shutdown(fds[0], unix.SHUT_WR)
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	r := os.NewFile(uintptr(fds[0]), "stdout")
	w := os.NewFile(uintptr(fds[1]), "stdout")
	rc, err := r.SyscallConn()
	if err != nil {
		r.Close()
		w.Close()
		return nil, nil, err
	}
	// Room for the credentials and the pidfd, and for a few descriptors a
	// server may send on purpose, which writerOf closes (the kernel drops
	// those that do not fit, and reports the truncation).
	oob := make([]byte, unix.CmsgSpace(unix.SizeofUcred)+unix.CmsgSpace(4)+unix.CmsgSpace(4*16))
	return &stdoutPipe{f: r, rc: rc, oob: oob}, w, nil
}

func (s *stdoutPipe) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n, oobn int
	var rerr error
	err := s.rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, rerr = unix.Recvmsg(int(fd), b, s.oob, unix.MSG_CMSG_CLOEXEC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	pid, pidfd := 0, -1
	if oobn > 0 {
		pid, pidfd = writerOf(s.oob[:oobn])
	}
	if err != nil {
		closePidfd(pidfd)
		if errors.Is(err, os.ErrClosed) || s.closed.Load() {
			err = io.EOF
		}
		return 0, err
	}
	if n == 0 {
		closePidfd(pidfd)
		return 0, io.EOF
	}
	if s.attribute != nil {
		s.attribute(pid, pidfd)
	}
	closePidfd(pidfd)
	return n, nil
}

func closePidfd(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// writerOf reads the writer's pid and pidfd from a read's control
// messages.
func writerOf(oob []byte) (pid, pidfd int) {
	pidfd = -1
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, -1
	}
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET {
			continue
		}
		switch m.Header.Type {
		case unix.SCM_CREDENTIALS:
			if c, err := unix.ParseUnixCredentials(&m); err == nil {
				pid = int(c.Pid)
			}
		case unix.SCM_PIDFD:
			if len(m.Data) >= 4 {
				pidfd = int(int32(uint32(m.Data[0]) | uint32(m.Data[1])<<8 | uint32(m.Data[2])<<16 | uint32(m.Data[3])<<24))
			}
		case unix.SCM_RIGHTS:
			// The server sent descriptors on its stdout (sendmsg): never
			// kept.
			if fds, err := unix.ParseUnixRights(&m); err == nil {
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
	}
	return pid, pidfd
}

func (s *stdoutPipe) close() {
	s.once.Do(func() {
		s.closed.Store(true)
		s.f.Close()
	})
}

// pidfdAlive reports whether pidfd still names a live process: after a
// process was read through /proc/PID, a pidfd of the writer that is still
// alive proves that PID was that writer (a pid is not reused while its
// process lives).
func pidfdAlive(pidfd int) bool {
	if pidfd < 0 {
		return false
	}
	return unix.PidfdSendSignal(pidfd, 0, nil, 0) == nil
}

// pidfdIno returns the pidfd's inode: on a kernel with pidfs (6.9) one per
// process, so two pidfds of the same process have the same one; 0 where
// unknown.
func pidfdIno(pidfd int) uint64 {
	if pidfd < 0 {
		return 0
	}
	pidfsOnce.Do(func() {
		var sf unix.Statfs_t
		onPidfs = unix.Fstatfs(pidfd, &sf) == nil && sf.Type == pidfsMagic
	})
	if !onPidfs {
		return 0
	}
	var st unix.Stat_t
	if unix.Fstat(pidfd, &st) != nil {
		return 0
	}
	return st.Ino
}

// onPidfs: this kernel's pidfds live on pidfs (one inode per process); told
// by the first pidfd looked at.
var (
	pidfsOnce sync.Once
	onPidfs   bool
)

// pidfsMagic is PID_FS_MAGIC (include/uapi/linux/magic.h).
const pidfsMagic = 0x50494446
