//go:build !linux && !darwin

package platform

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"runtime"

	"github.com/portcullis/portcullis/core/identity"
)

// Ancestry is not implemented on this operating system.
func (Peers) Ancestry(c net.Conn) ([]identity.Observed, error) {
	return nil, fmt.Errorf("process ancestry is not supported on %s", runtime.GOOS)
}

// Environ is not implemented on this operating system.
func (Peers) Environ(pid int, startTime uint64, name string) (string, bool, error) {
	return "", false, fmt.Errorf("process environments are not supported on %s", runtime.GOOS)
}

// Adopt is not implemented on this operating system.
func (Peers) Adopt(ctx context.Context, log *slog.Logger) error {
	return fmt.Errorf("child subreapers are not supported on %s", runtime.GOOS)
}

// AtTerminal is not implemented on this operating system.
func (Peers) AtTerminal(pid int, startTime uint64) (bool, error) {
	return false, fmt.Errorf("reading another process's terminal is not supported on %s", runtime.GOOS)
}
