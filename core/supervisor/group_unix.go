//go:build unix && !linux

package supervisor

import (
	"errors"
	"syscall"
)

// groupAlive reports whether any process of group pgid is left, by
// kill(-pgid, 0); EPERM means a member exists that we may not signal.
// Zombies count until launchd reaps them, which it does promptly.
func groupAlive(pgid int) (bool, error) {
	err := syscall.Kill(-pgid, 0)
	switch {
	case err == nil, errors.Is(err, syscall.EPERM):
		return true, nil
	case errors.Is(err, syscall.ESRCH):
		return false, nil
	default:
		return false, err
	}
}
