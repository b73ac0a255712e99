//go:build unix

package audit

import (
	"syscall"
	"time"
)

// cpuTime is the user and system CPU time this process used so far, so
// that benchmarks on a shared machine can report throughput per CPU second
// besides wall-clock throughput.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
