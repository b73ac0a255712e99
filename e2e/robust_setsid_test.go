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
// SIGTERM behind `sh -c` and must be killed; no process of the epoch is
// left, and the daemon's log names each one it stopped.
func TestRobustSetsidGrandchildStopped(t *testing.T) {
	tests := []struct {
		name   string
		script string
		signal string // how the server ends: "" exit status, or the signal
	}{
		{"server exits at end of stdin, grandchild holds its stdout", `setsid sleep 3600 & exec "$0"`, ""},
		{"grandchild without the server's pipes", `setsid sleep 3600 </dev/null >/dev/null 2>&1 & exec "$0"`, ""},
		{"stubborn server behind sh, grandchild ignoring SIGTERM", `trap "" TERM; setsid sleep 3600 & "$0" -stubborn; wait`, "SIGKILL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHome(t)
			addFaultyShell(t, h, "faulty", tt.script)
			d := startDaemon(t, h)
			a := startRaw(t, h, "faulty")
			a.handshake("1")
			if got := a.call("2", "tools/call", toolCall("echo", map[string]any{"message": "hi"}), 30*time.Second); got.text(t) != "hi" {
				t.Fatalf("echo answered %s", got.Raw)
			}
			r, _ := runOf(t, h, a.pid(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
			killEpochAtEnd(t, r.Epoch)
			out := escapees(t, r.Epoch, r.PID) // the group kill cannot reach them

			a.in.Close() // the agent leaves
			groupGone(t, r.PID, 30*time.Second, "the server's group")
			epochGone(t, r.Epoch, 30*time.Second, "the server's epoch")
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
	killEpochAtEnd(t, r.Epoch)
	out := escapees(t, r.Epoch, r.PID)

	signalPID(t, d1.PID(), syscall.SIGKILL)
	<-d1.Done()
	a.waitExited(30 * time.Second)
	groupGone(t, r.PID, 30*time.Second, "the server, at the end of its stdin")
	if left := epochProcs(t, r.Epoch); len(left) == 0 {
		t.Fatalf("the setsid grandchild did not outlive the killed daemon; nothing to test")
	}

	d2 := startDaemon(t, h)
	epochGone(t, r.Epoch, 30*time.Second, "the previous daemon's epoch")
	for _, p := range out {
		if !strings.Contains(d2.Output(), "pid="+strconv.Itoa(p.PID)) {
			t.Errorf("the new daemon's log does not name the escaped process %d (%s):\n%s", p.PID, p.Comm, d2.Output())
		}
	}
	verifyAudit(t, h)
}
