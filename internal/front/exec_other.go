//go:build !unix

package front

import (
	"fmt"
	"runtime"
)

// execApp is not implemented on this operating system.
func execApp(app, argv0 string, args []string) error {
	return fmt.Errorf("running %s: replacing this process is not supported on %s", app, runtime.GOOS)
}
