//go:build linux

package bench

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is one USER_HZ clock tick, the unit of utime and stime in
// /proc/PID/stat (proc(5)): 100 Hz on every Linux Go supports.
const clockTick = time.Second / 100

// SampleProc reads what process pid has used so far from /proc: CPU
// (utime + stime of /proc/PID/stat, which count every thread, exited ones
// included), the voluntary and nonvoluntary context switches of each live
// thread (/proc/PID/task/TID/status) and the resident set size (VmRSS of
// /proc/PID/status). It returns an error when the process is gone or a
// file does not read as proc(5) describes it.
func SampleProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now(), Switches: map[int]Switches{}}
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return s, err
	}
	if s.CPU, err = parseStatCPU(b); err != nil {
		return s, fmt.Errorf("%s/stat: %w", dir, err)
	}
	b, err = os.ReadFile(dir + "/status")
	if err != nil {
		return s, err
	}
	if s.RSS, err = parseStatusKB(b, "VmRSS"); err != nil {
		return s, fmt.Errorf("%s/status: %w", dir, err)
	}
	s.RSS *= 1024
	tasks, err := os.ReadDir(dir + "/task")
	if err != nil {
		return s, err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(dir + "/task/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited meanwhile
		}
		vol, err1 := parseStatusCount(b, "voluntary_ctxt_switches")
		nonvol, err2 := parseStatusCount(b, "nonvoluntary_ctxt_switches")
		if err1 != nil || err2 != nil {
			return s, fmt.Errorf("%s/task/%d/status: %v %v", dir, tid, err1, err2)
		}
		s.Switches[tid] = Switches{Voluntary: vol, Nonvoluntary: nonvol}
	}
	return s, nil
}

// parseStatCPU returns utime + stime of a /proc/PID/stat line. The command
// name (field 2) is in parentheses and may itself hold spaces and
// parentheses, so the fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", b)
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(0) ppid(1) … utime(11) stime(12), in clock ticks.
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// parseStatusCount returns the number on the "key:" line of a
// /proc/PID/status file.
func parseStatusCount(b []byte, key string) (uint64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: %w", key, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("no %s line", key)
}

// parseStatusKB returns the size in kB on the "key:" line of a
// /proc/PID/status file ("VmRSS:	  12345 kB").
func parseStatusKB(b []byte, key string) (int64, error) {
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("%s: %q is not a size in kB", key, v)
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s line", key)
}
