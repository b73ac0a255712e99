//go:build linux

package rawio

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// NewReader returns a reader of r's descriptor that reads with raw system
// calls when r is a net.Conn with a syscall.Conn (a *net.UnixConn: recv(2)
// with MSG_DONTWAIT, which never blocks whatever the descriptor's mode, even
// after os.File.Fd of a copy made it blocking) or an *os.File whose
// descriptor is non-blocking (read(2); the caller must not make it blocking
// afterwards, as Fd does), else r itself. Errors: what r's own Read
// returns once the descriptor is closed or its read deadline has passed
// (the raw read then gives way to r.Read, which reports it in r's own
// shape, e.g. os.ErrClosed or net.ErrClosed); io.EOF at end of stream; an
// *os.SyscallError for an error of read(2) itself.
func NewReader(r io.Reader) io.Reader {
	if rc, socket := rawConn(r); rc != nil {
		return &reader{rc: rc, r: r, socket: socket}
	}
	return r
}

// NewWriter returns a writer to w's descriptor that writes with raw system
// calls on the terms of NewReader (send(2) with MSG_DONTWAIT and
// MSG_NOSIGNAL on a socket, write(2) on a non-blocking file), else w
// itself. A Write writes all of p (waiting through the poller while the
// descriptor is full) or returns an error: what w's own Write returns once
// the descriptor is closed or its write deadline has passed, with the bytes
// written before; an *os.SyscallError for an error of write(2) itself (EPIPE
// once the reader is gone).
func NewWriter(w io.Writer) io.Writer {
	if rc, socket := rawConn(w); rc != nil {
		return &writer{rc: rc, w: w, socket: socket}
	}
	return w
}

// rawConn returns v's syscall.RawConn when v is a socket (socket: true) or
// a file whose descriptor is non-blocking, else nil.
func rawConn(v any) (rc syscall.RawConn, socket bool) {
	sc, ok := v.(syscall.Conn)
	if !ok {
		return nil, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, false
	}
	if _, ok := v.(net.Conn); ok {
		return rc, true
	}
	if _, ok := v.(*os.File); !ok {
		return nil, false
	}
	nonblocking := false
	if err := rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && flags&syscall.O_NONBLOCK != 0
	}); err != nil || !nonblocking {
		return nil, false
	}
	return rc, false
}

// NewSharedReader is NewReader for a file whose open file description
// others share and may switch back to blocking (the agent's stdio, handed
// over by its shim): each read is preadv2(2) with RWF_NOWAIT, which does
// not block whatever the descriptor's mode, so a raw read never holds the
// processor. Where the kernel does not take RWF_NOWAIT for the file (a
// terminal, a kernel before pipes took it) the first read says so and
// every read from then on is r's own. Anything but an *os.File that is
// non-blocking now (registered with the poller) is returned unchanged.
func NewSharedReader(r *os.File) io.Reader {
	if rc, _ := rawConn(r); rc != nil {
		return &reader{rc: rc, r: r, nowait: true}
	}
	return r
}

// NewSharedWriter is NewWriter on the terms of NewSharedReader:
// pwritev2(2) with RWF_NOWAIT.
func NewSharedWriter(w *os.File) io.Writer {
	if rc, _ := rawConn(w); rc != nil {
		return &writer{rc: rc, w: w, nowait: true}
	}
	return w
}

type reader struct {
	rc     syscall.RawConn
	r      io.Reader   // for the errors of a closed descriptor or a deadline
	socket bool        // recv with MSG_DONTWAIT, not read
	nowait bool        // preadv2 with RWF_NOWAIT, not read (NewSharedReader)
	plain  atomic.Bool // the kernel refused RWF_NOWAIT: r's own Read from now on
}

func (r *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.plain.Load() {
		return r.r.Read(p)
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		switch {
		case r.socket:
			n, errno = rawCall(syscall.SYS_RECVFROM, fd, p, syscall.MSG_DONTWAIT)
		case r.nowait:
			n, errno = nowaitCall(unix.SYS_PREADV2, fd, p)
		default:
			n, errno = rawCall(syscall.SYS_READ, fd, p, 0)
		}
		return errno != syscall.EAGAIN // false: wait until readable
	})
	switch {
	case err != nil:
		return r.r.Read(p) // closed, or past the deadline: r's own error
	case r.nowait && errno == syscall.EOPNOTSUPP:
		r.plain.Store(true)
		return r.r.Read(p)
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

type writer struct {
	rc     syscall.RawConn
	w      io.Writer // for the errors of a closed descriptor or a deadline
	socket bool      // send with MSG_DONTWAIT, not write
	nowait bool      // pwritev2 with RWF_NOWAIT, not write (NewSharedWriter)
	plain  atomic.Bool
}

func (w *writer) Write(p []byte) (int, error) {
	if w.plain.Load() {
		return w.w.Write(p)
	}
	done := 0
	var errno syscall.Errno
	err := w.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			var n int
			var e syscall.Errno
			switch {
			case w.socket:
				n, e = rawCall(syscall.SYS_SENDTO, fd, p[done:], syscall.MSG_DONTWAIT|syscall.MSG_NOSIGNAL)
			case w.nowait:
				n, e = nowaitCall(unix.SYS_PWRITEV2, fd, p[done:])
			default:
				n, e = rawCall(syscall.SYS_WRITE, fd, p[done:], 0)
			}
			if e == syscall.EAGAIN {
				return false // wait until writable
			}
			if e != 0 {
				errno = e
				return true
			}
			done += n
		}
		return true
	})
	switch {
	case err != nil:
		n, err := w.w.Write(p[done:])
		return done + n, err
	case w.nowait && errno == syscall.EOPNOTSUPP:
		w.plain.Store(true)
		n, err := w.w.Write(p[done:])
		return done + n, err
	case errno != 0:
		return done, os.NewSyscallError("write", errno)
	}
	return done, nil
}

// nowaitCall makes preadv2 or pwritev2 (op) on fd with p (not empty), at
// the file's position and with RWF_NOWAIT; again after EINTR.
func nowaitCall(op, fd uintptr, p []byte) (int, syscall.Errno) {
	iov := syscall.Iovec{Base: &p[0]}
	iov.SetLen(len(p))
	for {
		// The offset -1 (the file's position) goes as two words, low and high.
		n, _, e := syscall.RawSyscall6(op, fd, uintptr(unsafe.Pointer(&iov)), 1, ^uintptr(0), ^uintptr(0), unix.RWF_NOWAIT)
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}

// rawCall makes the system call op (read, write, recvfrom, sendto) on fd
// with p (not empty) and, for the last two, flags; again after EINTR.
func rawCall(op, fd uintptr, p []byte, flags int) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall6(op, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), uintptr(flags), 0, 0)
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}
