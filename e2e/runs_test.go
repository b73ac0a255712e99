package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestTwoRunsTwoEpochs proves that two agent runs of the same label get two
// server processes and two epochs, and that `portcullis status --json`
// reports for each the epoch, the pid and digests that match the file on
// disk (sha256 of the server binary) and the running process.
func TestTwoRunsTwoEpochs(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	allowTools(t, h, "echo", "echo", "slow")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	b := connectCmd(t, h.ConnectCommand("echo"), "")
	for _, ag := range []*agent{a, b} {
		if got := callCanonical(t, testContext(t, 30*time.Second), ag, "echo", map[string]any{"message": "hi"}); !strings.Contains(got, `"hi"`) {
			t.Fatalf("echo answered %s", got)
		}
	}
	want, err := harness.FileSHA256(echoBin)
	if err != nil {
		t.Fatal(err)
	}
	ra, rep := runOf(t, h, a.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	rb, _ := runOf(t, h, b.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	if len(rep.Runs) != 2 {
		t.Errorf("status lists %d live runs, want 2", len(rep.Runs))
	}
	if ra.Run == rb.Run || ra.Epoch == rb.Epoch || ra.PID == rb.PID {
		t.Errorf("the two runs share a run id, an epoch or a pid: %+v / %+v", []any{ra.Run, ra.Epoch, ra.PID}, []any{rb.Run, rb.Epoch, rb.PID})
	}
	for _, r := range []gateway.Status{ra, rb} {
		if r.Label != "echo" || len(r.Epoch) != 26 || r.PID <= 0 {
			t.Errorf("run %s: label %q epoch %q pid %d", r.Run, r.Label, r.Epoch, r.PID)
		}
		if r.Agent.PID != os.Getpid() {
			t.Errorf("run %s: agent pid %d, want this test's pid %d (the shim's parent)", r.Run, r.Agent.PID, os.Getpid())
		}
		rec := r.Record
		if rec == nil {
			t.Fatalf("run %s has no execution record", r.Run)
		}
		if rec.Epoch != r.Epoch || rec.ProcessID != r.PID {
			t.Errorf("run %s: record epoch %s pid %d, status epoch %s pid %d", r.Run, rec.Epoch, rec.ProcessID, r.Epoch, r.PID)
		}
		if rec.EntryDigest != want || rec.ResolvedExecutable.SHA256 != want {
			t.Errorf("run %s: entry digest %s, executable digest %s; sha256 of %s is %s", r.Run, rec.EntryDigest, rec.ResolvedExecutable.SHA256, echoBin, want)
		}
		if len(rec.Observed) == 0 || rec.Observed[0].PID != r.PID || rec.Observed[0].SHA256 != want {
			t.Errorf("run %s: observed %+v, want pid %d running %s", r.Run, rec.Observed, r.PID, want)
		}
		if syscall.Kill(r.PID, 0) != nil {
			t.Errorf("run %s: server pid %d is not running", r.Run, r.PID)
		}
	}
}

// TestKillShimStopsServerGroup proves that when the shim dies (SIGKILL, so
// it cannot say goodbye) the daemon stops the server's whole process group —
// here a shell that left a background `sleep` behind and exec'd the echo
// server — and that another agent run is not touched.
func TestKillShimStopsServerGroup(t *testing.T) {
	h := newHome(t)
	// Without the sandbox, whose PID namespace makes bwrap the group's
	// leader: the group is what this test is about.
	if err := h.AddServer(testContext(t, 30*time.Second), "family", []string{"--sandbox", "off"}, "/bin/sh", "-c", `sleep 300 & exec "$0"`, echoBin); err != nil {
		t.Fatal(err)
	}
	addServer(t, h, "echo", echoBin)
	allowTools(t, h, "echo", "echo", "slow")
	startDaemon(t, h)
	victim := connectCmd(t, h.ConnectCommand("family"), "2025-06-18")
	other := connectCmd(t, h.ConnectCommand("echo"), "2025-06-18")
	rv, _ := runOf(t, h, victim.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	ro, _ := runOf(t, h, other.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	// The server leads its own process group (pgid = its pid).
	left, err := harness.Leftovers(rv.PID, rv.PID)
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	if len(left) < 2 {
		t.Fatalf("want the server and its sleep in group %d before the kill, found %+v", rv.PID, left)
	}

	if err := victim.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the killed shim's server group to be gone", func() bool {
		left, err := harness.Leftovers(rv.PID, rv.PID)
		if err != nil {
			t.Fatal(err)
		}
		return len(left) == 0
	})
	runOf(t, h, victim.PID(), "ended", func(r gateway.Status) bool { return r.State == gateway.StateEnded })

	// The other run still has its server and answers.
	if left, _ := harness.Leftovers(ro.PID, ro.PID); len(left) == 0 {
		t.Errorf("the other run's server %d was stopped too", ro.PID)
	}
	if got := callCanonical(t, testContext(t, 30*time.Second), other, "echo", map[string]any{"message": "still here"}); !strings.Contains(got, "still here") {
		t.Errorf("the other run answered %s", got)
	}
}

// refusalIn returns the gateway refusal carried as the data of the JSON-RPC
// error in err, failing the test when there is none.
func refusalIn(t *testing.T, err error) control.Refusal {
	t.Helper()
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		t.Fatalf("got %v, want a JSON-RPC error", err)
	}
	var ref control.Refusal
	if err := json.Unmarshal(we.Data, &ref); err != nil {
		t.Fatalf("the error's data %s is not a refusal: %v", we.Data, err)
	}
	if int(we.Code) != ref.Error.Code() {
		t.Errorf("error code %d, want %d for %s", we.Code, ref.Error.Code(), ref.Error)
	}
	return ref
}

// TestKillServerEndsCallAtOnce proves that when the server process dies
// under a pending call, the agent gets an epoch_ended error at once rather
// than a hang, and that later calls are refused with server_unavailable.
func TestKillServerEndsCallAtOnce(t *testing.T) {
	h := newHome(t)
	addServer(t, h, "echo", echoBin)
	allowTools(t, h, "echo", "echo", "slow")
	startDaemon(t, h)
	a := connectCmd(t, h.ConnectCommand("echo"), "")
	r, _ := runOf(t, h, a.PID(), "ready", func(r gateway.Status) bool { return r.State == gateway.StateReady })
	ctx := testContext(t, time.Minute)

	p := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"duration_ms": 60000, "steps": 600}}
	p.SetProgressToken("doomed")
	done := make(chan error, 1)
	go func() {
		_, err := a.Session.CallTool(ctx, p)
		done <- err
	}()
	waitFor(t, "the slow call to be running", func() bool { return len(a.progress.forToken("doomed")) > 0 })

	if err := syscall.Kill(r.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case err := <-done:
		if d := time.Since(killed); d > time.Second {
			t.Errorf("the pending call returned %s after the kill, want within 1 s", d)
		}
		ref := refusalIn(t, err)
		if !strings.Contains(err.Error(), string(control.EpochEnded)) || ref.Error != control.EpochEnded || ref.Epoch != r.Epoch || ref.Server != "echo" {
			t.Errorf("the pending call returned %v (data %+v), want an epoch_ended error naming epoch %s", err, ref, r.Epoch)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the pending call still hangs 5 s after its server was killed")
	}

	// The daemon either relaunches the server (a new epoch) or reports it
	// failed; either way the dead process shows and the next call is
	// answered at once.
	after, _ := runOf(t, h, a.PID(), "a new epoch or failed", func(s gateway.Status) bool {
		return (s.Epoch != r.Epoch && s.State == gateway.StateReady) || s.State == gateway.StateFailed
	})
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := a.Session.CallTool(callCtx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "anyone?"}})
	switch {
	case after.State == gateway.StateFailed:
		if after.Exit == nil || after.Exit.Signal != "SIGKILL" {
			t.Errorf("status shows exit %+v, want killed by SIGKILL", after.Exit)
		}
		if ref := refusalIn(t, err); ref.Error != control.ServerUnavailable {
			t.Errorf("a call after the server died returned %v (data %+v), want server_unavailable", err, ref)
		}
	case err != nil || res.IsError:
		t.Errorf("a call on the relaunched epoch %s: %v %+v", after.Epoch, err, res)
	case after.PID == r.PID || after.Epochs < 2:
		t.Errorf("relaunched run has pid %d (was %d), %d epochs", after.PID, r.PID, after.Epochs)
	}
}
