//go:build darwin

package supervisor

import (
	"encoding/binary"
	"slices"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Which processes hold the server's pipes, on macOS: libproc's
// proc_pidinfo(PROC_PIDLISTFDS) lists a process's descriptors and
// proc_pidfdinfo(PROC_PIDFDPIPEINFO) describes a pipe descriptor, with the
// kernel's handle of its own end and of the peer end, the same value that
// fstat reports as the inode of that end (xnu bsd/kern/sys_pipe.c,
// pipe_stat and pipe_fillinfo). A process holds the server's stdin or
// stdout when one of its pipe descriptors is an end of the pipes the
// daemon holds the other end of. libproc is called through purego (no
// cgo), loaded once.
//
// This code type-checks here and has not run on a Mac. It fails towards
// the old rule: a process whose descriptors cannot be read (another
// user's, an error, libproc missing) counts as holding the pipes, and so
// does every process when none is seen holding them (the server's own
// process holds them at least until it hands them to a worker, so a scan
// where nobody does means the answers of libproc were not understood).

// From <sys/proc_info.h>.
const (
	procPIDListFDs       = 1   // PROC_PIDLISTFDS
	procFDInfoSize       = 8   // struct proc_fdinfo {int32 proc_fd; uint32 proc_fdtype}
	proxFDTypePipe       = 6   // PROX_FDTYPE_PIPE
	procPIDFDPipeInfo    = 6   // PROC_PIDFDPIPEINFO
	pipeFDInfoSize       = 184 // struct pipe_fdinfo: proc_fileinfo (24) + pipe_info (vinfo_stat 136, handle, peer, status, rfu)
	pipeHandleOffset     = 24 + 136
	pipePeerHandleOffset = pipeHandleOffset + 8
)

var (
	libprocOnce   sync.Once
	procPidinfo   func(pid int32, flavor int32, arg uint64, buf unsafe.Pointer, size int32) int32
	procPidfdinfo func(pid int32, fd int32, flavor int32, buf unsafe.Pointer, size int32) int32
)

func loadLibproc() bool {
	libprocOnce.Do(func() {
		lib, err := purego.Dlopen("/usr/lib/libSystem.B.dylib", purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return
		}
		a, errA := purego.Dlsym(lib, "proc_pidinfo")
		b, errB := purego.Dlsym(lib, "proc_pidfdinfo")
		if errA != nil || errB != nil {
			return
		}
		purego.RegisterFunc(&procPidinfo, a)
		purego.RegisterFunc(&procPidfdinfo, b)
	})
	return procPidinfo != nil && procPidfdinfo != nil
}

// holdsPipes reports whether process pid has a descriptor on an end of
// pipes (the inodes fstat gives of the daemon's ends); ok is false when
// its descriptors cannot be read.
func holdsPipes(pid int, pipes []uint64) (holds, ok bool) {
	if len(pipes) == 0 || !loadLibproc() {
		return false, false
	}
	n := procPidinfo(int32(pid), procPIDListFDs, 0, nil, 0)
	if n <= 0 {
		return false, false
	}
	buf := make([]byte, int(n)+16*procFDInfoSize) // room for descriptors opened meanwhile
	n = procPidinfo(int32(pid), procPIDListFDs, 0, unsafe.Pointer(&buf[0]), int32(len(buf)))
	if n <= 0 {
		return false, false
	}
	var info [pipeFDInfoSize]byte
	for off := 0; off+procFDInfoSize <= int(n); off += procFDInfoSize {
		fd := int32(binary.NativeEndian.Uint32(buf[off:]))
		if binary.NativeEndian.Uint32(buf[off+4:]) != proxFDTypePipe {
			continue
		}
		if procPidfdinfo(int32(pid), fd, procPIDFDPipeInfo, unsafe.Pointer(&info[0]), pipeFDInfoSize) != pipeFDInfoSize {
			continue
		}
		handle := binary.NativeEndian.Uint64(info[pipeHandleOffset:])
		peer := binary.NativeEndian.Uint64(info[pipePeerHandleOffset:])
		if slices.Contains(pipes, peer) || slices.Contains(pipes, handle) {
			return true, true
		}
	}
	return false, true
}
