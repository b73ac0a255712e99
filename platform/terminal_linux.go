//go:build linux

package platform

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// AtTerminal reports whether the standard input and the standard output of
// process pid, if it still is the process that started at startTime, are
// both a terminal: /proc/PID/fd/0 and /proc/PID/fd/1 lead to a character
// device of a terminal driver (pseudo-terminal slaves, majors 136–143 and
// the legacy 3; virtual consoles and serial ports, 4; /dev/tty and
// /dev/console, 5:0 and 5:1). It is the check `portcullis` makes of itself
// before a decision (isatty on its stdin and stdout), made by the daemon on
// the process that asks. A descriptor that is closed is not a terminal.
func (Peers) AtTerminal(pid int, startTime uint64) (bool, error) {
	return procAtTerminal("/proc", pid, startTime)
}

func procAtTerminal(root string, pid int, startTime uint64) (bool, error) {
	at := true
	for _, fd := range []int{0, 1} {
		var st unix.Stat_t
		err := unix.Stat(fmt.Sprintf("%s/%d/fd/%d", root, pid, fd), &st)
		if errors.Is(err, unix.ENOENT) {
			at = false
			continue
		}
		if err != nil {
			return false, fmt.Errorf("descriptor %d of process %d: %w", fd, pid, err)
		}
		if !terminalDevice(st.Mode, st.Rdev) {
			at = false
		}
	}
	st, err := (procfs{root: root}).readStat(pid)
	if err != nil {
		return false, fmt.Errorf("process %d: %w", pid, err)
	}
	if st.startTime != startTime {
		return false, fmt.Errorf("process %d is no longer the process that started at %d (pid reused)", pid, startTime)
	}
	return at, nil
}

// terminalDevice reports whether a file of mode and device rdev is a
// terminal device (see AtTerminal).
func terminalDevice(mode uint32, rdev uint64) bool {
	if mode&unix.S_IFMT != unix.S_IFCHR {
		return false
	}
	major, minor := unix.Major(rdev), unix.Minor(rdev)
	switch {
	case major >= 136 && major <= 143, major == 3, major == 4:
		return true
	case major == 5:
		return minor == 0 || minor == 1
	}
	return false
}
