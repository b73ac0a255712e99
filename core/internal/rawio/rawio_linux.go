//go:build linux

package rawio

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
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

// WriteFile writes all of p to the regular file f with raw write(2)
// calls, for the audit log's appends: a write of a few hundred bytes to
// the page cache does not wait for the disk, and made through f.Write it
// would wake the runtime's monitor thread at every event (the package
// doc). The price, taken knowingly: a write the kernel does hold (dirty
// page throttling under heavy write-back) holds this goroutine's processor
// with it, where f.Write would have let another goroutine have it. It
// falls back to f.Write when f has no descriptor to use.
func WriteFile(f *os.File, p []byte) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return f.Write(p)
	}
	done := 0
	var errno syscall.Errno
	if err := rc.Write(func(fd uintptr) bool {
		for done < len(p) && errno == 0 {
			var n int
			n, errno = rawCall(syscall.SYS_WRITE, fd, p[done:], 0)
			if errno == 0 && n == 0 {
				errno = syscall.EIO // a regular file that takes nothing
			}
			done += max(n, 0)
		}
		return true
	}); err != nil {
		n, err := f.Write(p[done:])
		return done + n, err
	}
	if errno != 0 {
		return done, &os.PathError{Op: "write", Path: f.Name(), Err: errno}
	}
	return done, nil
}

// SameFile reports whether path still names the file that info
// describes (os.SameFile of os.Stat(path) and info), with a raw
// fstatat(2): the audit log asks before every commit whether its file was
// replaced or deleted, and through os.Stat each ask would wake the
// runtime's monitor thread (the package doc). A stat of a local path
// whose metadata is cached, as it is for a file just written, does not
// wait for the disk. Its error is os.Stat's, an *os.PathError.
func SameFile(path string, info os.FileInfo) (bool, error) {
	want, ok := info.Sys().(*syscall.Stat_t)
	if !ok || sysFstatat == 0 {
		st, err := os.Stat(path)
		return err == nil && os.SameFile(st, info), err
	}
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	var st syscall.Stat_t
	dir := unix.AT_FDCWD // a variable: a negative constant does not convert
	for {
		_, _, e := syscall.RawSyscall6(sysFstatat, uintptr(dir), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&st)), 0, 0, 0)
		switch e {
		case 0:
			return st.Dev == want.Dev && st.Ino == want.Ino, nil
		case syscall.EINTR:
			continue
		}
		return false, &os.PathError{Op: "stat", Path: path, Err: e}
	}
}

// LocalFS reports whether path (or, when it does not exist yet, the
// nearest directory above it) is on a file system of a local disk or of
// memory, whose writes and stats of cached metadata do not wait on a
// network: WriteFile and SameFile are for such files only. A network file
// system (NFS, SMB, a FUSE mount such as sshfs) may hold a raw call for as
// long as its server is away, and with it a processor and the next
// garbage collection of the whole daemon.
func LocalFS(path string) bool {
	for p := filepath.Clean(path); ; p = filepath.Dir(p) {
		var st unix.Statfs_t
		err := unix.Statfs(p, &st)
		if err == nil {
			return localMagic[uint32(st.Type)]
		}
		if p == filepath.Dir(p) || !errors.Is(err, unix.ENOENT) {
			return false
		}
	}
}

// localMagic holds the statfs(2) f_type of the local file systems.
var localMagic = map[uint32]bool{
	unix.EXT4_SUPER_MAGIC:      true, // ext2, ext3, ext4
	unix.XFS_SUPER_MAGIC:       true,
	unix.BTRFS_SUPER_MAGIC:     true,
	unix.TMPFS_MAGIC:           true,
	unix.F2FS_SUPER_MAGIC:      true,
	0x2fc12fc1:                 true, // ZFS
	0x5346544e:                 true, // NTFS (ntfs3)
	unix.OVERLAYFS_SUPER_MAGIC: true,
}
