//go:build unix && !linux

package supervisor

import "time"

// waitLauncherExec does not wait where the launcher's exec cannot be seen
// cheaply: the tree's settling (tree.go) covers it.
func waitLauncherExec(int, string, <-chan struct{}, time.Duration) {}
