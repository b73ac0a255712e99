//go:build linux

package rawio

import (
	"io"
	"os"
	"syscall"
	"unsafe"
)

// NewReader returns a reader of r's descriptor that reads with raw system
// calls when r is a syscall.Conn (an *os.File, a *net.UnixConn) whose
// descriptor is non-blocking, else r itself. Errors: what r's own Read
// returns once the descriptor is closed or its read deadline has passed
// (the raw read then gives way to r.Read, which reports it in r's own
// shape, e.g. os.ErrClosed or net.ErrClosed); io.EOF at end of stream; an
// *os.SyscallError for an error of read(2) itself.
func NewReader(r io.Reader) io.Reader {
	if rc := rawConn(r); rc != nil {
		return &reader{rc: rc, r: r}
	}
	return r
}

// NewWriter returns a writer to w's descriptor that writes with raw system
// calls when w is a syscall.Conn whose descriptor is non-blocking, else w
// itself. A Write writes all of p (waiting through the poller while the
// descriptor is full) or returns an error: what w's own Write returns once
// the descriptor is closed or its write deadline has passed, with the bytes
// written before; an *os.SyscallError for an error of write(2) itself (EPIPE
// once the reader is gone).
func NewWriter(w io.Writer) io.Writer {
	if rc := rawConn(w); rc != nil {
		return &writer{rc: rc, w: w}
	}
	return w
}

// rawConn returns v's syscall.RawConn when its descriptor is non-blocking.
func rawConn(v any) syscall.RawConn {
	sc, ok := v.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	nonblocking := false
	if err := rc.Control(func(fd uintptr) {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		nonblocking = e == 0 && flags&syscall.O_NONBLOCK != 0
	}); err != nil || !nonblocking {
		return nil
	}
	return rc
}

type reader struct {
	rc syscall.RawConn
	r  io.Reader // for the errors of a closed descriptor or a deadline
}

func (r *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := r.rc.Read(func(fd uintptr) bool {
		n, errno = rawCall(syscall.SYS_READ, fd, p)
		return errno != syscall.EAGAIN // false: wait until readable
	})
	switch {
	case err != nil:
		return r.r.Read(p) // closed, or past the deadline: r's own error
	case errno != 0:
		return 0, os.NewSyscallError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

type writer struct {
	rc syscall.RawConn
	w  io.Writer // for the errors of a closed descriptor or a deadline
}

func (w *writer) Write(p []byte) (int, error) {
	done := 0
	var errno syscall.Errno
	err := w.rc.Write(func(fd uintptr) bool {
		for done < len(p) {
			n, e := rawCall(syscall.SYS_WRITE, fd, p[done:])
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
	case errno != 0:
		return done, os.NewSyscallError("write", errno)
	}
	return done, nil
}

// rawCall makes the read or write system call op on fd with p (not empty),
// again after EINTR.
func rawCall(op, fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(op, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
		if e != syscall.EINTR {
			return int(n), e
		}
	}
}
