//go:build linux

package platform

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/portcullis/portcullis/core/daemon"
)

var _ daemon.Lineage = Peers{}

// TestAncestryOfSocketPeer reads this process's own ancestry from the far
// end of a Unix socket it dialled: it starts at this process, each parent
// started no later than its child, and it ends at a process whose parent
// is pid 0.
func TestAncestryOfSocketPeer(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	cc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc := <-accepted
	defer sc.Close()
	chain, err := Peers{}.Ancestry(sc)
	if err != nil {
		t.Fatal(err)
	}
	if chain[0].PID != os.Getpid() || chain[0].PPID != os.Getppid() {
		t.Fatalf("chain starts at %+v, want this process %d (parent %d)", chain[0], os.Getpid(), os.Getppid())
	}
	exe, _ := os.Executable()
	if chain[0].Exe != exe {
		t.Errorf("exe %q, want %q", chain[0].Exe, exe)
	}
	for i := 1; i < len(chain); i++ {
		if chain[i].PID != chain[i-1].PPID || chain[i].StartTime > chain[i-1].StartTime {
			t.Errorf("link %d: %+v is not the parent of %+v", i, chain[i], chain[i-1])
		}
	}
	if last := chain[len(chain)-1]; last.PPID != 0 {
		t.Errorf("chain ends at %+v, whose parent is not 0", last)
	}
}

// fakeProc writes a /proc with the given stat lines (pid → "ppid start").
func fakeProc(t *testing.T, procs map[int]string) string {
	t.Helper()
	root := t.TempDir()
	for pid, v := range procs {
		var ppid int
		var start uint64
		fmt.Sscan(v, &ppid, &start)
		dir := filepath.Join(root, strconv.Itoa(pid))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		// Fields 3… : state ppid pgrp session tty_nr tpgid flags minflt
		// cminflt majflt cmajflt utime stime cutime cstime priority nice
		// num_threads itrealvalue starttime.
		stat := fmt.Sprintf("%d (a b) c) S %d 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 %d 0 0\n", pid, ppid, start)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestAncestryWalk(t *testing.T) {
	root := fakeProc(t, map[int]string{1: "0 1", 40: "1 50", 41: "40 60", 42: "41 70"})
	chain, err := procAncestry(root, 42)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range chain {
		got = append(got, fmt.Sprintf("%d@%d", p.PID, p.StartTime))
	}
	if want := "42@70 41@60 40@50 1@1"; strings.Join(got, " ") != want {
		t.Errorf("chain %v, want %s", got, want)
	}
}

// TestAncestryRefusesAReusedParent: a parent pid held by a process younger
// than its child is a reused pid (the real parent died); a child whose
// parent pid stays that way cannot be placed, and the walk fails rather
// than follow the stranger's ancestry.
func TestAncestryRefusesAReusedParent(t *testing.T) {
	root := fakeProc(t, map[int]string{1: "0 1", 41: "1 900", 42: "41 70"})
	if chain, err := procAncestry(root, 42); err == nil || !strings.Contains(err.Error(), "changed while it was read") {
		t.Fatalf("procAncestry = %v, %v; want an error about the tree changing", chain, err)
	}
	// A gone parent fails the same way while the child still names it.
	root = fakeProc(t, map[int]string{1: "0 1", 42: "41 70"})
	if _, err := procAncestry(root, 42); err == nil {
		t.Fatal("procAncestry followed a parent that does not exist")
	}
}

// TestReaperLeavesExecChildrenAlone: as a child subreaper this process
// adopts orphans and must reap them, but a child that os/exec started and
// will Wait for keeps its exit status.
func TestReaperLeavesExecChildrenAlone(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	// An orphan: sh starts a grandchild in its own session and exits;
	// the grandchild is reparented to this process before sh's Wait ends.
	out, err := exec.Command("sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if ppid, err := linuxPPID(orphan); err != nil || ppid != os.Getpid() {
		t.Fatalf("orphan %d has parent %d (%v), want this process %d", orphan, ppid, err, os.Getpid())
	}
	// A child of os/exec that has exited but not been waited for.
	own := exec.Command("sh", "-c", "exit 3")
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	exited(t, own.Process.Pid)
	if err := unix.Kill(orphan, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	exited(t, orphan)

	r := &reaper{root: "/proc", self: os.Getpid(), pidfds: true, log: discard, seen: map[procKey]time.Time{}}
	r.reap()
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", orphan)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the adopted orphan %d was not reaped (stat: %v)", orphan, err)
	}
	err = own.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("Wait of the exec child = %v, want exit status 3 (the reaper must not take it)", err)
	}
}

// exited blocks until process pid has exited (its pidfd turns readable).
func exited(t *testing.T, pid int) {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("process %d did not exit within 10 s (%v)", pid, err)
		}
		return
	}
}

var discard = slog.New(slog.DiscardHandler)
