package e2e

// Issue 8, case 10 and 13 for descendants that leave the server's process
// group: a grandchild started with setsid (a session and group of its own)
// cannot be reached by the group kill; it carries its epoch's mark
// (PORTCULLIS_EPOCH) and is stopped by it, when its agent leaves and when
// the next daemon cleans up after a daemon that was killed.

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/supervisor"
	"github.com/portcullis/portcullis/internal/harness"
)

// epochProcs returns the live processes whose environment carries the mark
// of epoch.
func epochProcs(t *testing.T, epoch string) []harness.Proc {
	t.Helper()
	out, err := markedProcs(epoch)
	if errors.Is(err, harness.ErrNoProc) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// killEpochAtEnd kills, when the test ends, the processes that then carry
// the mark of epoch, so that a failure leaves none behind (looked up again
// then: a pid seen earlier may name another process by that time).
func killEpochAtEnd(t *testing.T, epoch string) {
	t.Cleanup(func() {
		left, _ := markedProcs(epoch)
		for _, p := range left {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
		}
	})
}

// markOf returns the epoch's mark in pid's environment (the value of
// supervisor.EpochEnv): the launch epoch of its server, which every
// descendant inherits. It is not always the epoch that status shows: a
// process holding the server's stdio that starts or execs after the first
// answer (a setsid grandchild that was slow to start) is a new epoch
// observed on the same process, and its mark still names the launch's.
func markOf(t *testing.T, pid int) string {
	t.Helper()
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		if _, perr := harness.Processes(); errors.Is(perr, harness.ErrNoProc) {
			t.Skipf("skipping: %v", perr)
		}
		t.Fatalf("reading the environment of the server %d: %v", pid, err)
	}
	for e := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(e, []byte(supervisor.EpochEnv+"=")); ok {
			return string(v)
		}
	}
	t.Fatalf("the server %d carries no %s in its environment", pid, supervisor.EpochEnv)
	return ""
}

func markedProcs(epoch string) ([]harness.Proc, error) {
	all, err := harness.Processes()
	if err != nil {
		return nil, err
	}
	mark := []byte(supervisor.EpochEnv + "=" + epoch)
	var out []harness.Proc
	for _, p := range all {
		if p.State == "Z" {
			continue
		}
		env, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/environ")
		if err != nil || !slices.ContainsFunc(bytes.Split(env, []byte{0}), func(e []byte) bool { return bytes.Equal(e, mark) }) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// escapees returns the processes of epoch outside process group pgid,
// waiting (bounded) for at least one: setsid runs just after the fork.
func escapees(t *testing.T, epoch string, pgid int) []harness.Proc {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var out []harness.Proc
		for _, p := range epochProcs(t, epoch) {
			if p.PGID != pgid {
				out = append(out, p)
			}
		}
		if len(out) > 0 {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("no process of epoch %s outside group %d: the server did not start its setsid grandchild", epoch, pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pidsOf returns the pids of ps.
func pidsOf(ps []harness.Proc) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}

// shellQuote quotes path for sh; a path holding a single quote fails the
// test.
func shellQuote(t *testing.T, path string) string {
	t.Helper()
	if strings.Contains(path, "'") {
		t.Fatalf("path %q holds a single quote", path)
	}
	return "'" + path + "'"
}

// writeFIFO writes a line to the named pipe at path, which a process of
// the server has opened or is about to open for reading, waiting at most
// 30 s for that reader; when none comes it fails the test (and opens the
// pipe itself, so that the writer does not stay blocked).
func writeFIFO(t *testing.T, path string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		f, err := os.OpenFile(path, os.O_WRONLY, 0) // blocks until a reader opens it
		if err == nil {
			_, err = f.WriteString("go\n")
			err = errors.Join(err, f.Close())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("writing to %s: %v", path, err)
		}
	case <-time.After(30 * time.Second):
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			<-done
			f.Close()
		}
		t.Fatalf("no process of the server opened %s within 30 s", path)
	}
}

// epochGone waits up to d until no process carries epoch's mark.
func epochGone(t *testing.T, epoch string, d time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := epochProcs(t, epoch)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: processes of epoch %s still running after %s: %+v", what, epoch, d, left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestRobustSetsidGrandchildStopped proves case 10 for a grandchild that
// left the process group with setsid: when its agent leaves, it is stopped
// with its server, whether the server exits at the end of its stdin
// (leaving a daemonized child holding its stdout behind) or ignores it and
// SIGTERM behind `sh -c` and must be killed, and also when it started only
// after the server's first answer (holding the server's stdout; it carries
// the launch's mark, and as the system's own sleep it is no new epoch); no process of
// the epoch is left, and the daemon's log names each one it stopped.
//
// The grandchild is looked up by the mark in the server's environment,
// not by the epoch that status shows: a grandchild slow to start (a loaded
// machine) is such an observed epoch too, and its mark names the launch's.
func TestRobustSetsidGrandchildStopped(t *testing.T) {
	tests := []struct {
		name   string
		script string // FIFO: a named pipe the test writes a line to once the run is ready
		late   bool   // the grandchild waits for that line
		signal string // how the server ends: "" exit status, or the signal
	}{
		{"server exits at end of stdin, grandchild holds its stdout", `setsid sleep 3600 & exec "$0"`, false, ""},
		{"grandchild without the server's pipes", `setsid sleep 3600 </dev/null >/dev/null 2>&1 & exec "$0"`, false, ""},
		{"stubborn server behind sh, grandchild ignoring SIGTERM", `trap "" TERM; setsid sleep 3600 & "$0" -stubborn; wait`, false, "SIGKILL"},
		{"grandchild started after the first answer, holding the server's stdout", `(read go <FIFO; exec setsid sleep 3600) & exec "$0"`, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHome(t)
			fifo := filepath.Join(t.TempDir(), "go")
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			addFaultyShell(t, h, "faulty", strings.ReplaceAll(tt.script, "FIFO", shellQuote(t, fifo)))
			d := startDaemon(t, h)
			a := startRaw(t, h, "faulty")
			a.handshake("1")
			if got := a.call("2", "tools/call", toolCall("echo", map[string]any{"message": "hi"}), 30*time.Second); got.text(t) != "hi" {
				t.Fatalf("echo answered %s", got.Raw)
			}
			r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
			mark := markOf(t, r.PID)
			killEpochAtEnd(t, mark)
			if tt.late {
				writeFIFO(t, fifo)
			}
			out := escapees(t, mark, r.PID) // the group kill cannot reach them
			if tt.late {
				// The system's sleep, holding only the server's output, is
				// a helper: the epoch stays (the check before a call
				// carrying authority would say otherwise).
				if now, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady }); now.Epoch != r.Epoch {
					t.Errorf("epoch %s → %s after a system helper started; want it kept", r.Epoch, now.Epoch)
				}
			}

			a.in.Close() // the agent leaves
			groupGone(t, r.PID, 30*time.Second, "the server's group")
			epochGone(t, mark, 30*time.Second, "the server's epoch")
			st, _ := runOf(t, h, a.pid(), "ended", func(r gateway.Status) bool { return r.State == gateway.StateEnded && r.Exit != nil })
			if tt.signal != "" && (st.Exit == nil || st.Exit.Signal != tt.signal) {
				t.Errorf("ended run shows exit %+v, want killed by %s", st.Exit, tt.signal)
			}
			if code := a.waitExited(30 * time.Second); code != 0 {
				t.Errorf("the shim exited with %d after its agent left, want 0", code)
			}
			for _, p := range out {
				if !strings.Contains(d.Output(), "pid="+strconv.Itoa(p.PID)) {
					t.Errorf("the daemon's log does not name the escaped process %d (%s):\n%s", p.PID, p.Comm, d.Output())
				}
			}
		})
	}
}

// TestRobustDaemonKilledSetsidGrandchild proves case 13 for a grandchild
// that left the group with setsid, under a server that exits once its
// stdin closes: when the daemon is killed with SIGKILL the server exits and
// its grandchild runs on, with no process of the recorded group left to
// find; the next daemon finds it by its epoch's mark and stops it.
func TestRobustDaemonKilledSetsidGrandchild(t *testing.T) {
	h := newHome(t)
	addFaultyShell(t, h, "faulty", `setsid sleep 3600 </dev/null >/dev/null 2>&1 & exec "$0"`)
	ctx := testContext(t, 3*time.Minute)
	d1, err := h.StartDaemon(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d1.Stop(5 * time.Second) })
	a := startRaw(t, h, "faulty")
	a.handshake("1")
	r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	mark := markOf(t, r.PID) // the launch's, whatever status shows (see TestRobustSetsidGrandchildStopped)
	killEpochAtEnd(t, mark)
	out := escapees(t, mark, r.PID)
	leaveEpochCgroups(t, pidsOf(out)...) // only the mark is to find them

	freezeShim(t, a.pid()) // it would start a new daemon before the test's
	signalPID(t, d1.PID(), syscall.SIGKILL)
	<-d1.Done()
	groupGone(t, r.PID, 30*time.Second, "the server, at the end of its stdin")
	if left := epochProcs(t, mark); len(left) == 0 {
		t.Fatalf("the setsid grandchild did not outlive the killed daemon; nothing to test")
	}

	d2 := startDaemon(t, h)
	epochGone(t, mark, 30*time.Second, "the previous daemon's epoch")
	for _, p := range out {
		if !strings.Contains(d2.Output(), "pid="+strconv.Itoa(p.PID)) {
			t.Errorf("the new daemon's log does not name the escaped process %d (%s):\n%s", p.PID, p.Comm, d2.Output())
		}
	}
	verifyAudit(t, h)
}
