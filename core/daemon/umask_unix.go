//go:build unix

package daemon

import (
	"os"
	"syscall"
)

func umask(mask int) int { return syscall.Umask(mask) }

// fileOwner is the uid that owns the file fi describes.
func fileOwner(fi os.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
