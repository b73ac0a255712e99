//go:build linux

package supervisor

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"syscall"
)

// groupAlive reports whether any process of group pgid is still running.
// kill(-pgid, 0) answers for the group, but it also counts zombies, which
// wait for a reaper (PID 1 or a subreaper) that may be slow or absent in a
// container; so when it reports members, /proc decides whether any of them is
// more than a zombie.
func groupAlive(pgid int) (bool, error) {
	err := syscall.Kill(-pgid, 0)
	switch {
	case errors.Is(err, syscall.ESRCH):
		return false, nil
	case err != nil && !errors.Is(err, syscall.EPERM):
		return false, err
	}
	live, ok := liveMembers(pgid)
	if !ok {
		return true, nil
	}
	return live, nil
}

// liveMembers scans /proc/*/stat for a non-zombie process in group pgid; ok
// is false when /proc cannot be read.
func liveMembers(pgid int) (live, ok bool) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return false, false
	}
	want := []byte(strconv.Itoa(pgid))
	for _, e := range entries {
		name := e.Name()
		if name[0] < '0' || name[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + name + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		// After the command name: state ppid pgrp ...
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || !bytes.Equal(f[2], want) {
			continue
		}
		if !bytes.Equal(f[0], []byte("Z")) {
			return true, true
		}
	}
	return false, true
}
