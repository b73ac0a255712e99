//go:build !linux

package bench

import (
	"fmt"
	"runtime"
)

// SampleProc is implemented on Linux only: elsewhere it returns an error
// wrapping ErrNoProcStat.
func SampleProc(pid int) (ProcSample, error) {
	return ProcSample{}, fmt.Errorf("%w (this is %s)", ErrNoProcStat, runtime.GOOS)
}
