//go:build linux

package supervisor_test

import (
	"bufio"
	"bytes"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/core/supervisor/supervisortest"
)

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// marked returns the live processes that carry epoch's mark. The first
// call for an epoch has those that carry it when the test ends killed, so
// that a failing test leaves none behind (looked up again then: a pid seen
// earlier may name another process by that time).
func marked(t *testing.T, epoch ids.EpochID) []int {
	t.Helper()
	pids, err := supervisortest.Marked(supervisor.EpochEnv + "=" + string(epoch))
	if err != nil {
		t.Fatal(err)
	}
	if _, done := cleaned.LoadOrStore(epoch, true); !done {
		t.Cleanup(func() {
			left, _ := supervisortest.Marked(supervisor.EpochEnv + "=" + string(epoch))
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		})
	}
	return pids
}

// cleaned holds the epochs whose processes marked kills at the end.
var cleaned sync.Map

// pgidOf returns the process group of pid from /proc/PID/stat.
func pgidOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		t.Fatal(err)
	}
	return pgid
}

// alive reports whether pid runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && !strings.Contains(string(b[bytes.LastIndexByte(b, ')'):]), ") Z ")
}

// TestStopKillsEscapedDescendants proves that Stop leaves no descendant
// behind, whichever way it left the server's process group: setsid, setsid
// after a fork whose parent exited (a double fork), setpgid; held the
// server's stdout or not; ignored SIGTERM or not; and whether the server
// itself left at the end of its stdin or had to be killed. Each escapee is
// found by the epoch's mark and logged with its pid.
func TestStopKillsEscapedDescendants(t *testing.T) {
	fake, fakeArgs, fakeEnv := supervisortest.Command(supervisortest.EscapingParent)
	tests := []struct {
		name string
		spec supervisor.Spec
		// signal is how the server itself ends ("" = exit status 0 at the
		// end of stdin).
		signal string
	}{
		{"setsid, server exits at stdin EOF", supervisor.Spec{Command: "sh", Args: []string{"-c",
			`setsid sleep 3600 </dev/null >/dev/null 2>&1 & echo "ready $!"; exec cat >/dev/null`}}, ""},
		{"setsid grandchild holding stdout", supervisor.Spec{Command: "sh", Args: []string{"-c",
			`setsid sleep 3600 & echo "ready $!"; exec cat >/dev/null`}}, ""},
		{"double fork into a session of its own", supervisor.Spec{Command: "sh", Args: []string{"-c",
			`setsid -f sh -c 'echo "ready $$"; exec sleep 3600'; exec cat >/dev/null`}}, ""},
		{"stubborn server behind sh, setsid grandchild ignoring SIGTERM and holding stdout", supervisor.Spec{Command: "sh", Args: []string{"-c",
			`trap "" TERM; setsid sh -c 'echo "ready $$"; exec sleep 3600' & while :; do sleep 1; done`}}, "SIGKILL"},
		{"setsid grandchild ignoring SIGTERM", supervisor.Spec{Command: fake, Args: append(fakeArgs, "setsid"), Env: fakeEnv}, ""},
		{"setpgid grandchild ignoring SIGTERM", supervisor.Spec{Command: fake, Args: append(fakeArgs, "setpgid"), Env: fakeEnv}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &syncBuffer{}
			o := supervisor.Options{StopGrace: time.Second, KillGrace: 300 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(logs, nil))}
			tt.spec.Label = "escaper"
			p := start(t, tt.spec, o)
			if len(p.Epoch()) != 26 {
				t.Fatalf("Epoch() = %q, want a ULID", p.Epoch())
			}
			out := bufio.NewReader(p.Stdout())
			line := readLine(t, out)
			gpid, err := strconv.Atoi(strings.TrimPrefix(line, "ready "))
			if err != nil {
				t.Fatalf("got %q", line)
			}
			// The grandchild carries the mark and has left the group: the
			// group kill cannot reach it.
			deadline := time.Now().Add(10 * time.Second)
			for pgidOf(t, gpid) == p.Pid() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond) // setsid runs just after the fork
			}
			if g := pgidOf(t, gpid); g == p.Pid() {
				t.Fatalf("grandchild %d is still in the server's group %d", gpid, g)
			}
			// While it execs (setsid → sleep), /proc/PID/environ reads
			// empty for a moment: look again until it shows.
			before := marked(t, p.Epoch())
			for !slicesContains(before, gpid) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				before = marked(t, p.Epoch())
			}
			if !slicesContains(before, gpid) {
				t.Fatalf("grandchild %d does not carry %s=%s; marked: %v", gpid, supervisor.EpochEnv, p.Epoch(), before)
			}

			if err := p.Stop(testCtx(t)); err != nil {
				t.Fatalf("Stop: %v", err)
			}
			assertGroupEmpty(t, p.Pid())
			if alive(gpid) {
				t.Errorf("grandchild %d outside the group still runs after Stop", gpid)
			}
			if left := marked(t, p.Epoch()); len(left) != 0 {
				t.Errorf("processes of the epoch left after Stop: %v", left)
			}
			if e := p.Exit(); e.Signal != tt.signal {
				t.Errorf("server: %s, want signal %q", e, tt.signal)
			}
			if rest, err := io.ReadAll(out); err != nil || len(rest) != 0 {
				t.Errorf("stdout after Stop: %q, %v; want EOF", rest, err)
			}
			if !strings.Contains(logs.String(), "pid="+strconv.Itoa(gpid)) {
				t.Errorf("the log does not name the grandchild %d:\n%s", gpid, logs)
			}
		})
	}
}

func slicesContains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestStopEpochsExactMark proves that StopEpochs stops exactly the
// processes whose environment holds the mark of an epoch it was given,
// ignoring SIGTERM or not, each in a session of its own, and leaves alone a
// process with another epoch, a longer value or the ID under another name.
func TestStopEpochsExactMark(t *testing.T) {
	epoch, other := string(ids.NewEpoch()), string(ids.NewEpoch())
	spawn := func(script string, env ...string) int {
		t.Helper()
		cmd := exec.Command("sh", "-c", script)
		cmd.Env = append(os.Environ(), env...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { _ = cmd.Wait() }() // reaped, so a killed one is gone
		t.Cleanup(func() { _ = cmd.Process.Kill() })
		return cmd.Process.Pid
	}
	mark := supervisor.EpochEnv + "="
	target := spawn("exec sleep 3600", mark+epoch)
	stubborn := spawn(`trap "" TERM; exec sleep 3600`, "OTHER=1", mark+epoch)
	keep := []int{
		spawn("exec sleep 3600", mark+other),
		spawn("exec sleep 3600", mark+epoch+"X"),
		spawn("exec sleep 3600", "NOT_"+mark+epoch),
	}
	time.Sleep(100 * time.Millisecond) // the shells exec sleep with the environment they got
	logs := &syncBuffer{}
	start := time.Now()
	if err := supervisor.StopEpochs([]string{epoch, ""}, 300*time.Millisecond, slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatalf("StopEpochs: %v", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 5*time.Second {
		t.Errorf("StopEpochs took %s, want the grace (300ms) for the stubborn one and not much more", took)
	}
	waitGone := func(pid int) bool {
		for range 100 {
			if !alive(pid) {
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	for _, pid := range []int{target, stubborn} {
		if !waitGone(pid) {
			t.Errorf("marked process %d still runs", pid)
		}
		if !strings.Contains(logs.String(), "pid="+strconv.Itoa(pid)) {
			t.Errorf("the log does not name %d:\n%s", pid, logs)
		}
	}
	if !strings.Contains(logs.String(), "sending SIGKILL") || !strings.Contains(logs.String(), "exe=") {
		t.Errorf("the log does not show the SIGKILL of the stubborn one with its executable:\n%s", logs)
	}
	for _, pid := range keep {
		if !alive(pid) {
			t.Errorf("process %d without the exact mark was stopped", pid)
		}
	}
	if err := supervisor.StopEpochs(nil, 0, nil); err != nil {
		t.Errorf("StopEpochs of no epoch: %v", err)
	}
}

// TestEpochEnvCannotBeSet proves that the mark in a server's environment is
// the epoch Start minted, whatever the daemon's environment or Spec.Env say.
func TestEpochEnvCannotBeSet(t *testing.T) {
	t.Setenv(supervisor.EpochEnv, "inherited")
	cmd, argv, env := supervisortest.Command(supervisortest.PrintEnv, supervisor.EpochEnv)
	p := start(t, supervisor.Spec{Label: "env", Command: cmd, Args: argv, Env: append(env, supervisor.EpochEnv+"=forged")}, fast)
	out, err := io.ReadAll(p.Stdout())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), supervisor.EpochEnv+"="+string(p.Epoch())+"\n"; got != want || len(p.Epoch()) != 26 {
		t.Errorf("server sees %q, want %q", got, want)
	}
	q := start(t, supervisor.Spec{Label: "env", Command: cmd, Args: argv, Env: env}, fast)
	if q.Epoch() == p.Epoch() {
		t.Errorf("two starts share the epoch %s", p.Epoch())
	}
}
