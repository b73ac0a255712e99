//go:build linux

package supervisor

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// findServer waits, at most max, until the server runs below the
// processes of a launcher that stays (bubblewrap's monitor, then its init,
// pid 1 of the server's PID namespace) and returns its pid: from pid it
// follows, while a process runs the launcher's file, its first child (the
// earliest started) to the first one that runs another file. It returns
// the last process found, pid itself at worst, when the process exits or
// the time runs out first: the tree is then read from there, launcher and
// all. above are the launcher's processes it went through (pid, start
// time, executable), the server's ancestors up to pid: they carry the
// epoch's mark as the server does, and are never the epoch's processes.
func findServer(pid int, launcher string, done <-chan struct{}, max time.Duration) (server int, above []procView) {
	want, err := os.Stat(launcher)
	if err != nil {
		return pid, nil
	}
	deadline := time.Now().Add(max)
	wait := 250 * time.Microsecond
	cur := pid
	for {
		fi, err := os.Stat("/proc/" + strconv.Itoa(cur) + "/exe")
		switch {
		case err == nil && !os.SameFile(fi, want):
			return cur, above // it exec'd the server
		case err == nil:
			if kid, ok := firstChild(cur); ok {
				if v, ok := launcherView(cur, want); ok {
					above = append(above, v)
				}
				cur = kid
				continue
			}
		default:
			// Gone, or exiting: nothing below it to find.
			if cur == pid {
				return pid, nil
			}
			cur, above = pid, nil // start again from the top
		}
		if !time.Now().Before(deadline) {
			return cur, above
		}
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return pid, nil
		case <-t.C:
		}
		wait = min(2*wait, 4*time.Millisecond)
	}
}

// launcherView reads pid's start time and executable (as the tree scan's
// viewOf reads them); ok is false unless pid still runs the launcher's
// file (launcher), read after the path.
func launcherView(pid int, launcher os.FileInfo) (procView, bool) {
	st, err := readStat(pid)
	if err != nil || st.state == 'Z' {
		return procView{}, false
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return procView{}, false
	}
	if fi, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/exe"); err != nil || !os.SameFile(fi, launcher) {
		return procView{}, false
	}
	return procView{pid: pid, ppid: st.ppid, start: st.start, exe: strings.TrimSuffix(exe, " (deleted)")}, true
}

// firstChild returns the earliest started child of pid.
func firstChild(pid int) (int, bool) {
	kids, err := childrenOf(pid)
	if err != nil || len(kids) == 0 {
		return 0, false
	}
	best, bestStart := 0, uint64(0)
	for _, k := range kids {
		st, err := readStat(k)
		if err != nil {
			continue
		}
		if best == 0 || st.start < bestStart || (st.start == bestStart && k < best) {
			best, bestStart = k, st.start
		}
	}
	return best, best != 0
}
