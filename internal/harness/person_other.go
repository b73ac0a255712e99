//go:build !linux

package harness

import (
	"context"
	"fmt"
	"runtime"
)

// RunAtTerminal is implemented on Linux only.
func (h *Home) RunAtTerminal(ctx context.Context, args ...string) (Result, error) {
	return Result{}, fmt.Errorf("running a command at a terminal of its own is not implemented on %s", runtime.GOOS)
}
