package e2e

import "golang.org/x/sys/unix"

// endSubreaper undoes what a daemon run in the test's own process did
// (platform.Adopt: a child subreaper). Otherwise the processes that later
// tests start detached (decideCLI's person at a terminal) are adopted by
// the test process, which is the agent of their runs, and their decisions
// are refused as the agent's.
func endSubreaper() error { return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) }
