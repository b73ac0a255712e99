//go:build linux

package supervisor

import (
	"syscall"
	"time"
)

// changeTime is the file's status change time (ctime), which only the
// kernel sets: no one can date a change back.
func changeTime(st *syscall.Stat_t) time.Time { return time.Unix(st.Ctim.Unix()) }
