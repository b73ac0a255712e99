//go:build linux

package platform

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/identity"
)

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// startGroup starts argv in its own process group, killed at cleanup.
func startGroup(t *testing.T, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return cmd
}

// waitTree polls Tree until it lists n processes (bounded at 5 s).
// waitTree polls pid's process tree until done accepts it, or 5 s passed.
func waitTree(t *testing.T, pi identity.ProcessInfo, pid int, done func([]identity.Observed) bool) []identity.Observed {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		tree, err := pi.Tree(pid)
		if err != nil {
			t.Fatal(err)
		}
		if done(tree) || time.Now().After(deadline) {
			return tree
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTreeAndExecutable(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	if sleep, err = filepath.EvalSymlinks(sleep); err != nil {
		t.Fatal(err)
	}
	cmd := startGroup(t, "/bin/sh", "-c", "sleep 5 & wait")
	pi := NewProcessInfo()
	// Until the child has run exec: just after the fork it is still sh.
	tree := waitTree(t, pi, cmd.Process.Pid, func(tree []identity.Observed) bool {
		return len(tree) >= 2 && tree[1].Exe == sleep
	})
	if len(tree) != 2 {
		t.Fatalf("Tree = %+v, want sh and sleep", tree)
	}
	for _, o := range tree {
		if o.StartTime == 0 {
			t.Errorf("pid %d: no start time", o.PID)
		}
	}
	got := []identity.Observed{{PID: tree[0].PID, PPID: tree[0].PPID, Exe: tree[0].Exe}, {PID: tree[1].PID, PPID: tree[1].PPID, Exe: tree[1].Exe}}
	want := []identity.Observed{{PID: cmd.Process.Pid, PPID: os.Getpid(), Exe: sh}, {PID: tree[1].PID, PPID: cmd.Process.Pid, Exe: sleep}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Tree (-want +got):\n%s", diff)
	}

	obs, err := identity.Observe(context.Background(), pi, cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if obs[0].SHA256 != fileSum(t, sh) || obs[1].SHA256 != fileSum(t, sleep) {
		t.Errorf("Observe digests %s %s, want sha256 of %s and %s", obs[0].SHA256, obs[1].SHA256, sh, sleep)
	}
}

// TestOpenExecutableSeesReplacedFile runs a copy of sleep, replaces the copy
// on disk, and still reads the bytes that run.
func TestOpenExecutableSeesReplacedFile(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip(err)
	}
	orig, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "server")
	if err := os.WriteFile(bin, orig, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := startGroup(t, bin, "5")
	next := bin + ".new"
	if err := os.WriteFile(next, []byte("#!/bin/sh\necho rebuilt\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	rc, err := NewProcessInfo().OpenExecutable(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(b) != sha256.Sum256(orig) {
		t.Error("OpenExecutable read the replacement, not the running file")
	}
	tree, err := NewProcessInfo().Tree(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := bin + " (deleted)"; tree[0].Exe != want {
		t.Errorf("Exe = %q, want %q", tree[0].Exe, want)
	}
}

func TestMissingProcess(t *testing.T) {
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid // reaped: gone (pid reuse within this test is implausible)
	pi := NewProcessInfo()
	if _, err := pi.Tree(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Tree of a gone pid: %v, want fs.ErrNotExist", err)
	}
	if _, err := pi.OpenExecutable(pid); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenExecutable of a gone pid: %v, want fs.ErrNotExist", err)
	}
}

func TestParseStat(t *testing.T) {
	tests := []struct {
		in   string
		want procStat
		err  bool
	}{
		{"42 (sleep) S 7 42 42 0 -1 4194304 100 0 0 0 0 0 0 0 20 0 1 0 123456 5177344 220 18446744073709551615\n",
			procStat{pid: 42, state: 'S', ppid: 7, startTime: 123456}, false},
		{"43 (a) b) (c) Z 1 43 43 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0 0\n",
			procStat{pid: 43, state: 'Z', ppid: 1, startTime: 99}, false},
		{"44 (x) S 1 2 3\n", procStat{}, true},
		{"garbage", procStat{}, true},
	}
	for _, tt := range tests {
		got, err := parseStat(tt.want.pid, []byte(tt.in))
		if (err != nil) != tt.err {
			t.Errorf("parseStat(%q) error %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if !tt.err && got != tt.want {
			t.Errorf("parseStat(%q) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
