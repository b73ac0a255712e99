//go:build linux

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/internal/front"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestConnectStartsTheFullProgram proves that when no daemon runs, the
// daemon that `portcullis connect` (the front, what agents run) starts is
// the full program beside it, `portcullis-app daemon`, and that the
// agent's handshake is answered through it (docs/DESIGN.md, "Processes").
func TestConnectStartsTheFullProgram(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	h.Env = append(h.Env, "PORTCULLIS_START_WAIT="+shimStartWait.String())
	stopStrayDaemons(t, h)

	a := startRaw(t, h, "echo")
	a.handshake("1") // fails the test unless answered

	pid := daemonOf(t, h)
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	want, err := filepath.EvalSymlinks(front.AppPath(portcullis))
	if err != nil {
		t.Fatal(err)
	}
	if exe != want {
		t.Errorf("the daemon the shim started runs %s, want the full program %s", exe, want)
	}

	a.in.Close()
	if c := a.waitExited(30 * time.Second); c != 0 {
		t.Errorf("the shim exited with %d, want 0", c)
	}
	// Stop the daemon (it outlives the shim, as it does for an agent) and
	// wait for its end on a pidfd, bounded.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((30 * time.Second).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		if err != nil || n == 0 {
			t.Fatalf("the daemon (pid %d) did not exit within 30 s of SIGTERM: %v", pid, err)
		}
		break
	}
}

// daemonOf returns the pid of the one running `… daemon` process whose
// environment holds h's PORTCULLIS_HOME.
func daemonOf(t *testing.T, h *harness.Home) int {
	t.Helper()
	procs, err := harness.Processes()
	if err != nil {
		t.Fatal(err)
	}
	home := []byte("PORTCULLIS_HOME=" + h.Dir + "\x00")
	var found []int
	for _, p := range procs {
		dir := "/proc/" + strconv.Itoa(p.PID)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		env, _ := os.ReadFile(dir + "/environ")
		if p.State != "Z" && bytes.HasSuffix(cmdline, []byte("\x00daemon\x00")) && bytes.Contains(env, home) {
			found = append(found, p.PID)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d daemons of %s run (pids %v), want the one the shim started", len(found), h.Dir, found)
	}
	return found[0]
}
