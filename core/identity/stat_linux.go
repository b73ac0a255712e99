//go:build linux

package identity

import (
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// statKey returns the cache key of fi, from its syscall.Stat_t.
func statKey(fi fs.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{
		dev:   uint64(st.Dev),
		ino:   uint64(st.Ino),
		size:  st.Size,
		mtime: st.Mtim.Nano(),
		ctime: st.Ctim.Nano(),
	}, true
}

// Magic numbers (statfs f_type) of the local file systems that stamp
// change times from the kernel's clock with nanoseconds
// (linux/magic.h): ext4 (and ext2/3 mounted by the ext4 driver), XFS,
// Btrfs, tmpfs, F2FS.
const (
	ext4Magic  = 0xEF53
	xfsMagic   = 0x58465342
	btrfsMagic = 0x9123683E
	tmpfsMagic = 0x01021994
	f2fsMagic  = 0xF2F52010
)

// stampTick returns the tick of the kernel's coarse real-time clock
// (clock_getres(CLOCK_REALTIME_COARSE): one timer interrupt), which
// stamps the change times of the file systems above; false for any other
// file system (network file systems take the server's clock, FUSE its
// own). An ext4 that keeps whole seconds (128-byte inodes) is told by
// its stamps (racyWindowOf).
func stampTick(f *os.File) (time.Duration, bool) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, false
	}
	switch uint32(st.Type) {
	case ext4Magic, xfsMagic, btrfsMagic, tmpfsMagic, f2fsMagic:
	default:
		return 0, false
	}
	var res unix.Timespec
	if err := unix.ClockGetres(unix.CLOCK_REALTIME_COARSE, &res); err != nil || res.Nano() <= 0 {
		return 0, false
	}
	return time.Duration(res.Nano()), true
}
