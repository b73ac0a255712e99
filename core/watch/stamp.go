package watch

import "os"

// stamp is what a stat of a watched file says of its content: a file
// written, truncated or replaced since has another stamp. Where the system
// tells them (statSys), the device, inode and change time are part of it:
// the change time is the kernel's, no one can set it back.
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
	s := stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	s.dev, s.ino, s.ctime = statSys(fi)
	return s
}
