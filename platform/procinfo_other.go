//go:build !linux && !darwin

package platform

import (
	"fmt"
	"io"
	"runtime"

	"github.com/portcullis/portcullis/core/identity"
)

// NewProcessInfo returns a ProcessInfo whose methods fail with an error naming
// this operating system: process identity is implemented for Linux and macOS
// only.
func NewProcessInfo() identity.ProcessInfo { return unsupported{} }

type unsupported struct{}

var _ identity.ProcessInfo = unsupported{}

func (unsupported) Tree(pid int) ([]identity.Observed, error) {
	return nil, fmt.Errorf("process %d: process identity is not implemented on %s", pid, runtime.GOOS)
}

func (unsupported) OpenExecutable(pid int) (io.ReadCloser, error) {
	return nil, fmt.Errorf("process %d: process identity is not implemented on %s", pid, runtime.GOOS)
}
