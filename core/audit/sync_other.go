//go:build !linux

package audit

import "os"

// syncData makes the data appended to f durable. On macOS Go's File.Sync
// issues fcntl(F_FULLFSYNC), which also flushes the drive's write cache
// (plain fsync there does not).
func syncData(f *os.File) error { return f.Sync() }
