//go:build linux

package supervisor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// findMarked scans /proc for live processes of this user, other than this
// one, whose initial environment (/proc/PID/environ) holds the mark of one
// of epochs. The environment of another user's process, or of one that is
// not dumpable, cannot be read and is not looked at; a zombie's reads empty.
func findMarked(epochs map[string]bool) ([]marked, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("looking for processes of the epoch: %w", err)
	}
	uid := uint32(os.Getuid())
	self := os.Getpid()
	var out []marked
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		dir := "/proc/" + e.Name()
		var st syscall.Stat_t
		if syscall.Stat(dir, &st) != nil || st.Uid != uid {
			continue
		}
		env, err := os.ReadFile(dir + "/environ")
		if err != nil || !bytes.Contains(env, []byte(EpochEnv+"=")) {
			continue
		}
		epoch, ok := envHas(env, epochs)
		if !ok {
			continue
		}
		s, err := readStat(pid)
		if err != nil || s.state == 'Z' {
			continue
		}
		exe, _ := os.Readlink(dir + "/exe")
		out = append(out, marked{pid: pid, pgid: s.pgid, start: s.start, exe: exe, epoch: epoch})
	}
	return out, nil
}

// statFields are the /proc/PID/stat fields findMarked uses.
type statFields struct {
	state byte
	ppid  int
	pgid  int
	start uint64
}

// readStat parses /proc/PID/stat; the command name (field 2) may hold spaces
// and parentheses, so fields are counted from its last ')'.
func readStat(pid int) (statFields, error) {
	var buf [512]byte
	b, err := readSmall("/proc/"+strconv.Itoa(pid)+"/stat", buf[:])
	if err != nil {
		return statFields{}, err
	}
	st, ok := parseStat(b)
	if !ok {
		return statFields{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	return st, nil
}

// parseStat reads a /proc/PID/stat line; ok is false when it is malformed.
func parseStat(b []byte) (statFields, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return statFields{}, false
	}
	var f [20][]byte // f[0] is field 3 (state), f[2] field 5 (pgrp), f[19] field 22 (starttime)
	n := 0
	for w := range bytes.FieldsSeq(b[i+1:]) {
		f[n] = w
		if n++; n == len(f) {
			break
		}
	}
	if n < len(f) || len(f[0]) != 1 {
		return statFields{}, false
	}
	ppid, ok1 := atoi(f[1])
	pgid, ok2 := atoi(f[2])
	start, ok3 := atou(f[19])
	if !ok1 || !ok2 || !ok3 {
		return statFields{}, false
	}
	return statFields{state: f[0][0], ppid: int(ppid), pgid: int(pgid), start: start}, true
}

// atou parses a decimal number without allocating (false: empty, not
// digits, or above 2^64-1); atoi also takes a sign.
func atou(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

func atoi(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	n, ok := atou(b)
	if neg {
		return -int64(n), ok
	}
	return int64(n), ok
}

// startTimeOf returns the kernel's start time of pid, in the unit the
// tree scan records (clock ticks since boot).
func startTimeOf(pid int) (uint64, error) {
	st, err := readStat(pid)
	return st.start, err
}

// readSmall reads a small /proc file into buf with three system calls
// (open, read, close), where os.ReadFile takes twice as many; a file longer
// than buf is cut to it.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}

// signalMarked sends sig to m unless m's pid now names another process:
// through a pidfd when the kernel has them (Linux 5.3), opened before the
// start time is checked again, so that the signal reaches the process
// checked even if the pid is reused meanwhile; else with kill(2) right
// after the check. A process that is gone is not an error.
func signalMarked(m marked, sig syscall.Signal) error {
	fd, err := unix.PidfdOpen(m.pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		fd = -1 // ENOSYS (an older kernel) or a seccomp filter: kill(2)
	} else {
		defer unix.Close(fd)
	}
	s, err := readStat(m.pid)
	if err != nil || s.start != m.start {
		return nil // gone, or the pid names another process now
	}
	if fd >= 0 {
		err = unix.PidfdSendSignal(fd, sig, nil, 0)
	} else {
		err = syscall.Kill(m.pid, sig)
	}
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}
