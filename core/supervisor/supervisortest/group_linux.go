//go:build linux

package supervisortest

import (
	"bytes"
	"os"
	"slices"
	"strconv"
)

// GroupMembers returns, sorted, the pids of live processes (not zombies) in
// process group pgid, by scanning /proc/*/stat (field 5 is the group).
func GroupMembers(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 || string(f[0]) == "Z" {
			continue
		}
		if g, err := strconv.Atoi(string(f[2])); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// Marked returns, sorted, the pids of live processes (not zombies) whose
// environment (/proc/PID/environ) holds exactly the entry "K=V" given, as
// far as this user may read.
func Marked(entry string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(b []byte) bool { return string(b) == entry }) {
			continue
		}
		// A zombie's environ reads empty, so the process was live.
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids, nil
}
