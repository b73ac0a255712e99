//go:build darwin

package identity

import (
	"io/fs"
	"os"
	"syscall"
	"time"
)

// statKey returns the cache key of fi, from its syscall.Stat_t.
func statKey(fi fs.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{
		dev:   uint64(st.Dev),
		ino:   st.Ino,
		size:  st.Size,
		mtime: st.Mtimespec.Nano(),
		ctime: st.Ctimespec.Nano(),
	}, true
}

// stampTick is not known here: the one-second racy window applies.
func stampTick(*os.File) (time.Duration, bool) { return 0, false }
