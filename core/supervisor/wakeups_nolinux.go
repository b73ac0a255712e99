//go:build unix && !linux

package supervisor

// noWakeups is the poll-only implementation of wakeups (Linux has its
// own).
type noWakeups struct{}

func (noWakeups) C() <-chan struct{} { return nil }
func (noWakeups) watch([]int)        {}
func (noWakeups) close()             {}
