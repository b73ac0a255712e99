//go:build !linux

package bench

import "os"

// Fdatasync is File.Sync where there is no fdatasync(2) (on macOS Go's
// Sync issues F_FULLFSYNC, which the audit log uses there).
func Fdatasync(f *os.File) error { return f.Sync() }
