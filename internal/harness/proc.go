package harness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// ErrNoProc is returned by the process helpers on systems without a Linux
// /proc file system.
var ErrNoProc = errors.New("reading processes needs the Linux /proc file system")

// Proc is one process as /proc/PID/stat describes it.
type Proc struct {
	PID, PPID, PGID int
	State           string // "R", "S", "Z" (zombie)…
	Comm            string
}

// Processes lists every process in /proc. On systems other than Linux it
// returns an error wrapping ErrNoProc.
func Processes() ([]Proc, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("%w (this is %s)", ErrNoProc, runtime.GOOS)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoProc, err)
	}
	var out []Proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		open, close := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(b[close+1:]))
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		out = append(out, Proc{PID: pid, PPID: ppid, PGID: pgid, State: f[0], Comm: string(b[open+1 : close])})
	}
	return out, nil
}

// Leftovers returns the processes, zombies excluded, that are pid itself or
// members of process group pgid: what is left of a server whose group
// should be gone.
func Leftovers(pid, pgid int) ([]Proc, error) {
	all, err := Processes()
	if err != nil {
		return nil, err
	}
	var out []Proc
	for _, p := range all {
		if p.State != "Z" && (p.PID == pid || p.PGID == pgid) {
			out = append(out, p)
		}
	}
	return out, nil
}

// RSS returns the resident set size of pid in bytes (VmRSS in
// /proc/PID/status). On systems other than Linux it returns an error
// wrapping ErrNoProc.
func RSS(pid int) (int64, error) {
	if runtime.GOOS != "linux" {
		return 0, fmt.Errorf("%w (this is %s)", ErrNoProc, runtime.GOOS)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					return 0, fmt.Errorf("VmRSS of %d: %w", pid, err)
				}
				return kb * 1024, nil
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/%d/status", pid)
}
