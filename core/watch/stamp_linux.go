//go:build linux

package watch

import (
	"os"
	"syscall"
)

// stamp is what a stat of a watched file says of its content: a file
// written, truncated or replaced since has another stamp. The change time
// is the kernel's: no one can set it back.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64 // nanoseconds
	missing      bool
}

// stampOf stats path (following symbolic links).
func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{missing: true}
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	}
	return stamp{dev: uint64(st.Dev), ino: st.Ino, size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}
