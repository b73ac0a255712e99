//go:build linux

package rawio

import "syscall"

// sysFstatat is fstatat(2) on this architecture, with the layout of
// syscall.Stat_t.
const sysFstatat = syscall.SYS_FSTATAT
