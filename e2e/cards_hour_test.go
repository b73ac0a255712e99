package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/internal/harness"
)

// cardRuns lists the agent runs card c decides: its own and those it lists
// (read from its JSON form, alsoRuns).
func cardRuns(t *testing.T, c authz.Card) []string {
	t.Helper()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var runs struct {
		AgentRun string `json:"agentRun"`
		AlsoRuns []struct {
			AgentRun string `json:"agentRun"`
		} `json:"alsoRuns"`
	}
	if err := json.Unmarshal(b, &runs); err != nil {
		t.Fatal(err)
	}
	out := []string{runs.AgentRun}
	for _, r := range runs.AlsoRuns {
		out = append(out, r.AgentRun)
	}
	return out
}

// heldOn waits until a pending card shows the status call of each of runs
// and returns the pending requests then.
func heldOn(t *testing.T, h *harness.Home, what string, runs ...string) []authz.Request {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		reqs := approvals(t, h)
		all := true
		for _, run := range runs {
			all = all && slices.ContainsFunc(reqs, func(r authz.Request) bool {
				return slices.Contains(cardRuns(t, r.Card), run)
			})
		}
		if all {
			return reqs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no pending card shows the calls of %v within 30 s; pending: %+v", what, runs, reqs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// newUnsandboxedScopeSetup is newScopeSetup with the server unsandboxed
// (--sandbox off), as servers run where bubblewrap does not (macOS, Linux
// without bwrap): no launcher's processes above the server.
func newUnsandboxedScopeSetup(t *testing.T) *publishSetup {
	t.Helper()
	s := &publishSetup{home: newHome(t), binDir: t.TempDir()}
	s.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
	s.bin, _ = buildPublish(t, s.binDir, publishRevA)
	if err := s.home.AddServer(testContext(t, 30*time.Second), pubLabel,
		[]string{"--cwd", s.binDir, "--env", "PUBLISH_CALL_LOG=" + s.callLog, "--sandbox", "off"}, s.bin); err != nil {
		t.Fatal(err)
	}
	s.daemon = startDaemon(t, s.home)
	return s
}

// decideAllPending approves every pending card as the person, and returns
// how many there were.
func decideAllPending(t *testing.T, h *harness.Home) int {
	t.Helper()
	n := 0
	for _, r := range approvals(t, h) {
		decideCLI(t, h, "approve", string(r.ID))
		n++
	}
	return n
}

// quietCall calls status and fails t if the call waits for a person.
func quietCall(t *testing.T, h *harness.Home, s *mcp.ClientSession) {
	t.Helper()
	ch := asyncCall(t, s, "status", map[string]any{})
	for {
		select {
		case r := <-ch:
			okText(t, r)
			return
		case <-time.After(200 * time.Millisecond):
			if p := approvals(t, h); len(p) > 0 {
				t.Fatalf("a call covered by the grants made asks again: %+v", p)
			}
		}
	}
}

// waitReady waits for the run of shimPID to be ready on an epoch other than
// old, and returns it.
func waitReady(t *testing.T, h *harness.Home, shimPID int, old string) string {
	t.Helper()
	return string(waitRun(t, h, shimPID, buildWait, "ready on a new epoch", readyOn(old)).Epoch)
}

// TestScriptedHourAsksOncePerChange: the scripted hour of docs/BENCHMARKS.md,
// driven rather than timed: two agent runs of one program on one server,
// five code-only rebuilds, 40 calls (4 per run after each rebuild, the
// first of each held for the person). The person is asked at most once
// per rebuild: at most 5 cards in the hour (the first use before it is
// one card too). The server runs in its default sandbox (bubblewrap where
// it works): each run's epoch has bubblewrap's monitor and init above the
// server, carrying the epoch's mark, and the two runs' epochs of one
// rebuild must still record the same processes, the server's alone.
func TestScriptedHourAsksOncePerChange(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	b := connectListChanged(t, s.home, pubLabel, "")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, ag := range []*listChangedAgent{a, b} {
		if _, err := ag.Session.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	stA := waitRun(t, s.home, a.PID(), 30*time.Second, "ready", readyOn(""))
	stB := waitRun(t, s.home, b.PID(), 30*time.Second, "ready", readyOn(""))
	epochA, epochB := stA.Epoch, stB.Epoch
	round := func() int {
		ca := asyncCall(t, a.Session, "status", map[string]any{})
		heldOn(t, s.home, "run A", string(stA.Run))
		cb := asyncCall(t, b.Session, "status", map[string]any{})
		held := heldOn(t, s.home, "runs A and B", string(stA.Run), string(stB.Run))
		if len(held) > 1 {
			// Say why the cards stayed apart: what each shows, and the
			// processes each run's epoch recorded.
			for _, r := range held {
				c, _ := json.Marshal(r.Card)
				t.Logf("card %s: %s", r.ID, c)
			}
			for _, ag := range []*listChangedAgent{a, b} {
				st := waitRun(t, s.home, ag.PID(), time.Second, "a status", func(gateway.Status) bool { return true })
				if st.Record != nil {
					obs, _ := json.Marshal(st.Record.Observed)
					t.Logf("run %s, epoch %s, observed: %s", st.Run, st.Epoch, obs)
				}
			}
		}
		for _, ag := range []*listChangedAgent{a, b} {
			// What each epoch records as running is the server alone:
			// nothing of the sandbox's launcher above it.
			st := waitRun(t, s.home, ag.PID(), time.Second, "a status", func(gateway.Status) bool { return true })
			if st.Record == nil || len(st.Record.Observed) == 0 {
				t.Fatalf("run %s: epoch %s has no observed processes", st.Run, st.Epoch)
			}
			for _, o := range st.Record.Observed {
				if o.Exe != s.bin {
					t.Errorf("run %s: epoch %s records process %d running %s, not the server %s", st.Run, st.Epoch, o.PID, o.Exe, s.bin)
				}
			}
		}
		n := decideAllPending(t, s.home)
		okText(t, await(t, ca))
		okText(t, await(t, cb))
		return n
	}
	setup := round()
	asks, calls := 0, 0
	for i := 1; i <= 5; i++ {
		s.rebuild(t, publishRevA+" -X main.buildLabel=hour"+string(rune('0'+i)))
		epochA, epochB = ids.EpochID(waitReady(t, s.home, a.PID(), string(epochA))), ids.EpochID(waitReady(t, s.home, b.PID(), string(epochB)))
		for _, ag := range []*listChangedAgent{a, b} {
			if _, err := ag.Session.ListTools(ctx, nil); err != nil { // the agents refetch, as after list_changed
				t.Fatal(err)
			}
		}
		asks += round()
		calls += 2
		for range 3 {
			quietCall(t, s.home, a.Session)
			quietCall(t, s.home, b.Session)
			calls += 2
		}
	}
	t.Logf("scripted hour: first use %d card(s); 5 code-only rebuilds, %d calls of 2 runs: %d card(s)", setup, calls, asks)
	if calls != 40 {
		t.Fatalf("the script made %d calls, want 40", calls)
	}
	if asks > 5 || setup != 1 {
		t.Errorf("the person was asked %d times in the hour (and %d times at first use), want at most 5 (and 1)", asks, setup)
	}
}
