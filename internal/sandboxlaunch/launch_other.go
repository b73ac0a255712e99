//go:build !linux

package sandboxlaunch

import (
	"fmt"
	"runtime"
)

// Main reports that the launcher runs on Linux only (macOS: sandbox-exec is
// the launcher).
func Main([]string) error {
	return fmt.Errorf("the sandbox launcher runs on Linux only, not on %s", runtime.GOOS)
}
