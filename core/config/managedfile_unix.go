//go:build unix

package config

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// notRootOnly says why fi is not a file or directory that root alone can
// change ("" when it is): another owner, or write permission for its
// group or others. A symbolic link is refused too (the path was resolved
// before).
func notRootOnly(fi fs.FileInfo) string {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "is a symbolic link"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "has no owner that can be read"
	}
	if st.Uid != 0 {
		return fmt.Sprintf("is owned by uid %d, not root", st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("is writable by its group or others (mode %04o)", fi.Mode().Perm())
	}
	return ""
}

func openNoFollow(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}
