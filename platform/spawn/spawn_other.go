//go:build !unix

package spawn

import (
	"fmt"
	"runtime"
)

// StartDaemon is not implemented on this operating system.
func StartDaemon(exe, logFile string, env []string) (*Started, error) {
	return nil, fmt.Errorf("starting the daemon is not supported on %s", runtime.GOOS)
}
