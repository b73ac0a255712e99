//go:build linux

package platform

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strconv"

	"github.com/portcullis/portcullis/core/identity"
)

// NewProcessInfo returns the kernel's view of processes from /proc:
// /proc/PID/exe for the executable (readable even after the file was replaced
// on disk), /proc/PID/stat for the parent pid (field 4) and start time (field
// 22, clock ticks since boot), and children found by scanning /proc.
func NewProcessInfo() identity.ProcessInfo { return procfs{root: "/proc"} }

type procfs struct{ root string }

var _ identity.ProcessInfo = procfs{}

// procStat holds the /proc/PID/stat fields Tree uses.
type procStat struct {
	pid       int
	state     byte
	ppid      int
	startTime uint64
}

// readStat parses /proc/PID/stat; the command name (field 2) may hold spaces
// and parentheses, so fields are counted from its last ')'.
func (p procfs) readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("%s/%d/stat", p.root, pid))
	if err != nil {
		return procStat{}, err
	}
	return parseStat(pid, b)
}

func parseStat(pid int, b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	f := bytes.Fields(b[i+1:]) // f[0] is field 3 (state)
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("process %d: malformed stat", pid)
	}
	ppid, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: stat ppid: %w", pid, err)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: stat starttime: %w", pid, err)
	}
	return procStat{pid: pid, state: f[0][0], ppid: ppid, startTime: start}, nil
}

// Tree returns pid and its live descendants breadth-first (children in pid
// order). Zombie descendants run no code and are left out. A descendant whose
// executable cannot be read keeps an empty Exe. A missing pid gives an error
// wrapping fs.ErrNotExist.
func (p procfs) Tree(pid int) ([]identity.Observed, error) {
	root, err := p.readStat(pid)
	if err != nil {
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	entries, err := os.ReadDir(p.root)
	if err != nil {
		return nil, err
	}
	children := make(map[int][]procStat)
	for _, e := range entries {
		cpid, err := strconv.Atoi(e.Name())
		if err != nil || cpid == pid {
			continue
		}
		st, err := p.readStat(cpid)
		if err != nil {
			continue // exited while scanning
		}
		if st.state == 'Z' {
			continue
		}
		children[st.ppid] = append(children[st.ppid], st)
	}
	out := []identity.Observed{p.observed(root)}
	for i := 0; i < len(out); i++ {
		kids := children[out[i].PID]
		slices.SortFunc(kids, func(a, b procStat) int { return a.pid - b.pid })
		for _, k := range kids {
			out = append(out, p.observed(k))
		}
	}
	return out, nil
}

func (p procfs) observed(st procStat) identity.Observed {
	exe, _ := os.Readlink(fmt.Sprintf("%s/%d/exe", p.root, st.pid))
	return identity.Observed{PID: st.pid, PPID: st.ppid, Exe: exe, StartTime: st.startTime}
}

// OpenExecutable opens /proc/PID/exe: the very file the process runs, even if
// the path now names a different or no file. A gone process (or a zombie,
// whose executable the kernel has released) gives an error wrapping
// fs.ErrNotExist.
func (p procfs) OpenExecutable(pid int) (io.ReadCloser, error) {
	f, err := os.Open(fmt.Sprintf("%s/%d/exe", p.root, pid))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(fmt.Sprintf("%s/%d", p.root, pid)); errors.Is(serr, fs.ErrNotExist) {
				return nil, fmt.Errorf("process %d: %w", pid, serr)
			}
		}
		return nil, fmt.Errorf("process %d executable: %w", pid, err)
	}
	return f, nil
}
