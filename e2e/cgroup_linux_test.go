package e2e

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// leaveEpochCgroups moves each of pids that a daemon put in a cgroup of its
// epoch (portcullis-daemon-PID/portcullis-EPOCH, platform/cgroup_linux.go)
// into the test process's own cgroup, as if the system gave the daemon no
// cgroups. A test that kills a daemon and then proves that the next one
// stops its servers by their group or their epoch's mark calls it before
// the kill: once that daemon is dead, any daemon's first launch (another
// test's, another package's tests running at the same time, another data
// directory's) kills the dead daemon's cgroups whole, and removes what the
// test was to see stopped, without a log line that names it. Processes in
// no such cgroup, and systems without cgroup v2, are left as they are.
func leaveEpochCgroups(t *testing.T, pids ...int) {
	t.Helper()
	mount, own := cgroup2Mount(t), cgroupOf(t, os.Getpid())
	if mount == "" || own == "" {
		return
	}
	procs := filepath.Join(mount, own, "cgroup.procs")
	for _, pid := range pids {
		cg := cgroupOf(t, pid)
		if !strings.Contains(cg, "/portcullis-daemon-") {
			continue
		}
		if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("moving process %d out of its epoch's cgroup %s into %s: %v", pid, cg, procs, err)
		}
		if now := cgroupOf(t, pid); now != own {
			t.Fatalf("process %d is in cgroup %s after the move, want %s", pid, now, own)
		}
	}
}

// cgroupOf returns pid's cgroup v2 path ("0::PATH" in /proc/PID/cgroup),
// "" when it has none.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("reading the cgroup of process %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	return ""
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted, "" when
// it is not.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS…] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if f := strings.Fields(pre); ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4]
		}
	}
	return ""
}
