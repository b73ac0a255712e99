//go:build unix

package front

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// execApp replaces this process with the full program at app, with argv0
// as its argv[0], args after it and the same environment: the pid, the
// signals the caller sends, the exit code and the terminal stay the
// caller's. It returns only on failure, with the one step to take when
// app does not exist.
func execApp(app, argv0 string, args []string) error {
	err := syscall.Exec(app, append([]string{argv0}, args...), os.Environ())
	if errors.Is(err, syscall.ENOENT) {
		return errors.New(notFound(app) + "; reinstall Portcullis: make install puts both there")
	}
	return fmt.Errorf("running %s: %w", app, err)
}
