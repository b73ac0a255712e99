//go:build !linux

package supervisortest

import (
	"fmt"
	"runtime"
)

// GroupMembers is implemented on Linux only; elsewhere it returns an error
// naming the operating system.
func GroupMembers(pgid int) ([]int, error) {
	return nil, fmt.Errorf("process group %d: GroupMembers is not implemented on %s", pgid, runtime.GOOS)
}

// Marked is implemented on Linux only; elsewhere it returns an error naming
// the operating system.
func Marked(entry string) ([]int, error) {
	return nil, fmt.Errorf("processes marked %s: Marked is not implemented on %s", entry, runtime.GOOS)
}
