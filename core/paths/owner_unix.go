//go:build unix

package paths

import (
	"io/fs"
	"syscall"
)

// ownerUID returns the user ID that owns the file described by fi.
func ownerUID(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
