//go:build !linux && !darwin

package platform

import (
	"fmt"
	"runtime"

	"github.com/portcullis/portcullis/core/supervisor"
)

// NewSandbox reports that this system has no sandbox.
func NewSandbox(level string) (supervisor.Sandbox, error) {
	return nil, fmt.Errorf("%w: no sandbox on %s", ErrSandboxUnsupported, runtime.GOOS)
}
