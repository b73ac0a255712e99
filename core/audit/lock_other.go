//go:build !unix

package audit

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir is not implemented outside Unix: Portcullis runs on macOS and Linux.
func lockDir(path string) (*os.File, error) {
	return nil, fmt.Errorf("audit log locking is not supported on %s", runtime.GOOS)
}

// syncDir is not implemented outside Unix.
func syncDir(dir string) error {
	return fmt.Errorf("directory sync is not supported on %s", runtime.GOOS)
}
