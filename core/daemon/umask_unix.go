//go:build unix

package daemon

import "syscall"

func umask(mask int) int { return syscall.Umask(mask) }
