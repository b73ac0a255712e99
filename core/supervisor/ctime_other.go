//go:build unix && !linux && !darwin

package supervisor

import (
	"syscall"
	"time"
)

// changeTime is not read on these systems: every file counts as changed
// now, after any measurement.
func changeTime(*syscall.Stat_t) time.Time { return time.Now() }
