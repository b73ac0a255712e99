//go:build linux || darwin

package watch

import (
	"os"
	"syscall"
)

// statSys returns the device, inode and change time (nanoseconds) of fi;
// zeros when the stat carries none.
func statSys(fi os.FileInfo) (dev, ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, 0
	}
	return uint64(st.Dev), st.Ino, ctimeOf(st)
}
