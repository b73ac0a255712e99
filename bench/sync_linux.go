package bench

import (
	"os"
	"syscall"
)

// Fdatasync is fdatasync(2) of f, the sync the audit log uses on Linux.
func Fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
