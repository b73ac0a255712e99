//go:build linux

package platform

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/supervisor"
)

// TestCgroupKillsWhatEscaped: a descendant that clears its environment
// (no epoch mark) and leaves the process group (setsid) escaped Stop
// before; in a cgroup of its own, it ends with the epoch, and the group
// is removed.
// Sandboxed too, the process starts into its cgroup (clone3 with
// CLONE_INTO_CGROUP and the new namespaces at once).
func TestCgroupKillsWhatEscaped(t *testing.T) {
	t.Run("sandbox=off", func(t *testing.T) { testCgroupKillsWhatEscaped(t, nil) })
	t.Run("sandbox=standard", func(t *testing.T) {
		sb, err := NewSandbox(SandboxStandard)
		if err != nil {
			t.Skipf("no sandbox here: %v", err)
		}
		testCgroupKillsWhatEscaped(t, sb)
	})
}

func testCgroupKillsWhatEscaped(t *testing.T, sb supervisor.Sandbox) {
	cg := NewCgroups(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := `setsid env -i /bin/sh -c 'echo $$; exec sleep 300' & wait`
	p, err := supervisor.Start(ctx, supervisor.Spec{Label: "grouped", Command: "/bin/sh", Args: []string{"-c", script}, Cgroups: cg, Sandbox: sb, Hide: []string{t.TempDir()}},
		supervisor.Options{NoTree: true, StopGrace: time.Millisecond, KillGrace: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	where := p.Cgroup()
	if strings.HasPrefix(where, "none — ") {
		_ = p.Stop(ctx)
		t.Skipf("no cgroup here: %s", where)
	}
	dir, _, ok := strings.Cut(where, " (killed whole when the epoch ends)")
	if !ok || !strings.HasSuffix(dir, "/portcullis-"+string(p.Epoch())) {
		t.Fatalf("status says the cgroup is %q", where)
	}
	line, err := bufio.NewReader(p.Stdout()).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the escaped process's pid: %q", line)
	}
	procs, err := os.ReadFile(dir + "/cgroup.procs")
	if sb != nil {
		// Its own PID namespace numbers it: find it by its NSpid.
		pid = hostPid(strings.Fields(string(procs)), pid)
	}
	if err != nil || !strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(pid)+"\n") {
		t.Fatalf("cgroup.procs of %s: %q (%v), want pid %d", dir, procs, err, pid)
	}
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		if f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
			t.Errorf("the escaped process %d still runs after Stop: %s", pid, st)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the cgroup %s is still there after Stop: %v", dir, err)
	}
}

// TestCgroupsOfADeadDaemonRemoved: the groups that a daemon killed before
// it ended its epochs left behind are killed and removed by the next
// daemon; those of a live daemon are left alone.
func TestCgroupsOfADeadDaemonRemoved(t *testing.T) {
	c := NewCgroups(nil)
	probe := exec.Command("/bin/true")
	g, where, err := c.Place(probe, "probe-dead-daemon")
	if g == nil || err != nil {
		t.Skipf("no cgroup here: %s %v", where, err)
	}
	g.Started()
	if err := g.Kill(); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Dir(g.(*linuxCgroup).dir) // portcullis-daemon-<this pid>
	dir := filepath.Dir(mine)
	gone := exec.Command("/bin/true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(dir, fmt.Sprintf("portcullis-daemon-%d", gone.Process.Pid))
	left := filepath.Join(dead, "portcullis-EPOCH")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	sleep := exec.Command("/bin/sleep", "300")
	fd, err := unix.Open(left, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sleep.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	err = sleep.Start()
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- sleep.Wait() }()
	var logged bytes.Buffer
	removeDeadDaemons(dir, slog.New(slog.NewTextHandler(&logged, nil)))
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = sleep.Process.Kill()
		t.Fatal("the dead daemon's server still runs")
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead daemon's cgroup %s is still there: %v", dead, err)
	}
	if _, err := os.Stat(mine); err != nil {
		t.Errorf("the live daemon's cgroup %s was removed: %v", mine, err)
	}
	// What was stopped is named: another data directory's daemon may
	// have left it, and its person would otherwise never learn why.
	if want := fmt.Sprintf("%d (sleep)", sleep.Process.Pid); !strings.Contains(logged.String(), want) || !strings.Contains(logged.String(), left) {
		t.Errorf("the log does not name the stopped process %s in %s:\n%s", want, left, logged.String())
	}
}

// hostPid returns the pid, among procs, of the process numbered ns in its
// own PID namespace (the last field of NSpid); ns if none is.
func hostPid(procs []string, ns int) int {
	for _, p := range procs {
		b, err := os.ReadFile("/proc/" + p + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(strings.TrimPrefix(l, "NSpid:")); strings.HasPrefix(l, "NSpid:") && len(f) > 1 && f[len(f)-1] == strconv.Itoa(ns) {
				n, _ := strconv.Atoi(p)
				return n
			}
		}
	}
	return ns
}
