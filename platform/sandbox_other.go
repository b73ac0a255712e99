//go:build !linux && !darwin

package platform

import (
	"fmt"
	"runtime"

	"github.com/portcullis/portcullis/core/supervisor"
)

// NewSandbox reports that this system has no sandbox.
func NewSandbox(level string) (supervisor.Sandbox, error) {
	return nil, &supervisor.UnsupportedError{Reason: fmt.Sprintf("this system (%s) has no sandbox", runtime.GOOS)}
}
