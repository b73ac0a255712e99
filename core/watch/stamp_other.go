//go:build !linux && !darwin

package watch

import "os"

// stamp is what a stat of a watched file says of its content: a file
// written, truncated or replaced since has another size or modification
// time (no change time is read on these systems).
type stamp struct {
	size    int64
	mtime   int64 // nanoseconds
	missing bool
}

// stampOf stats path (following symbolic links).
func stampOf(path string) stamp {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{missing: true}
	}
	return stamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
