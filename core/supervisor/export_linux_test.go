//go:build linux

package supervisor

// SetForkCounter makes p's tree checks read the kernel's fork counter
// from f instead of /proc/stat, so that a test can hold it still (as on a
// machine where nothing else forks) and move it when the tree forks.
func SetForkCounter(p *Process, f func() (uint64, bool)) {
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	p.tree.quick.counter = f
}

// QuickChecks returns how many checks of p's tree the quick check
// answered without a full read.
func QuickChecks(p *Process) int {
	p.treeMu.Lock()
	defer p.treeMu.Unlock()
	return p.tree.quicks
}

// ForkCount reads the kernel's fork counter as the quick check does.
func ForkCount() (uint64, bool) {
	var q quickFiles
	defer q.close()
	return q.forks()
}
