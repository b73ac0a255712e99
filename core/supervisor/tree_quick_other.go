//go:build unix && !linux

package supervisor

// quickFiles is the quick check's state; this system has no fork counter,
// so every check reads the whole tree (Process.quickLocked).
type quickFiles struct{}

func (quickFiles) forks() (uint64, bool) { return 0, false }
func (quickFiles) same(*procView) int    { return procChanged }
func (quickFiles) retain([]member)       {}
func (*quickFiles) close()               {}
