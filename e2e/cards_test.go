package e2e

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/internal/harness"
)

// TestOneCardForTwoRunsOfOneRebuild: two agent runs of the same program on
// the publish server, each with its own process. Their first calls are
// decided by one card that lists both; approving it lets both calls
// through, one grant per run and epoch. After one code-only rebuild (both
// runs get a new epoch of the same code) their calls are again on one
// card; approving it with one run left out (--skip-run) lets the other
// run's call through and keeps the left-out run's call held, on a card of
// its own, until the person decides that one too. The server runs
// unsandboxed here (the scripted hour runs it in the sandbox).
func TestOneCardForTwoRunsOfOneRebuild(t *testing.T) {
	s := newUnsandboxedScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	b := connectListChanged(t, s.home, pubLabel, "")
	ctx := testContext(t, 3*time.Minute)
	for _, ag := range []*listChangedAgent{a, b} {
		if _, err := ag.Session.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	runA := waitRun(t, s.home, a.PID(), 30*time.Second, "ready", readyOn("")).Run
	runB := waitRun(t, s.home, b.PID(), 30*time.Second, "ready", readyOn("")).Run

	both := func(what string) (authz.Request, <-chan asyncResult, <-chan asyncResult) {
		t.Helper()
		ca := asyncCall(t, a.Session, "status", map[string]any{})
		heldOn(t, s.home, what+": run A", string(runA))
		cb := asyncCall(t, b.Session, "status", map[string]any{})
		reqs := heldOn(t, s.home, what+": runs A and B", string(runA), string(runB))
		if len(reqs) != 1 {
			t.Fatalf("%s: %d cards pending, want one for both runs: %+v", what, len(reqs), reqs)
		}
		c := reqs[0].Card
		if got := c.RunNames(); !slices.Equal(got, []ids.RunID{runA, runB}) {
			t.Fatalf("%s: the card decides %v, want [%s %s]", what, got, runA, runB)
		}
		for _, rc := range c.Runs() {
			if rc.Tool != "status" {
				t.Errorf("%s: run %s's part of the card shows %q, want its status call", what, rc.AgentRun, rc.Tool)
			}
		}
		if lines := strings.Join(c.Lines(), "\n"); !strings.Contains(lines, "Decides 2 runs of this agent program") {
			t.Errorf("%s: the text card does not list both runs:\n%s", what, lines)
		}
		return reqs[0], ca, cb
	}

	first, ca, cb := both("first use")
	// The audit log names every run the card decides, not its first alone.
	var also []audit.RunEpoch
	for _, e := range eventsOf(t, s.home, audit.TypeApprovalRequested, string(runA)) {
		var f audit.ApprovalRequested
		if err := json.Unmarshal(e.Fields, &f); err == nil && f.Request == first.ID {
			also = f.AlsoRuns
		}
	}
	if len(also) != 1 || also[0].AgentRun != runB || also[0].Epoch == "" {
		t.Errorf("approval_requested %s: alsoRuns %+v, want run %s with its epoch", first.ID, also, runB)
	}
	out := decideCLI(t, s.home, "approve", string(first.ID))
	if !strings.Contains(out, "decides 2 agent runs") {
		t.Errorf("approve printed %q, want it to say both runs were decided", out)
	}
	for _, r := range []asyncResult{await(t, ca), await(t, cb)} {
		if got := okText(t, r); !strings.HasPrefix(got, "publish server revision A") {
			t.Errorf("status: %q", got)
		}
	}
	stA := waitRun(t, s.home, a.PID(), 10*time.Second, "a grant", func(r gateway.Status) bool { return len(r.Grants) > 0 })
	stB := waitRun(t, s.home, b.PID(), 10*time.Second, "a grant", func(r gateway.Status) bool { return len(r.Grants) > 0 })
	for _, st := range []gateway.Status{stA, stB} {
		if len(st.Grants) != 1 || st.Grants[0].ExecutionEpoch != st.Epoch || st.Grants[0].AgentRun != st.Run || st.Grants[0].Request != first.ID {
			t.Errorf("run %s: grants %+v, want one grant of its own epoch %s from %s", st.Run, st.Grants, st.Epoch, first.ID)
		}
	}

	s.rebuild(t, publishRevALabel) // new code, the same catalog
	epochA := waitRun(t, s.home, a.PID(), buildWait, "a new epoch", readyOn(string(stA.Epoch))).Epoch
	epochB := waitRun(t, s.home, b.PID(), buildWait, "a new epoch", readyOn(string(stB.Epoch))).Epoch
	for _, ag := range []*listChangedAgent{a, b} {
		if _, err := ag.Session.ListTools(ctx, nil); err != nil { // the agents refetch, as after list_changed
			t.Fatal(err)
		}
	}
	second, ca, cb := both("after the rebuild")
	if rc, _ := second.Card.Run(runA); rc.CurrentEpoch != epochA {
		t.Errorf("run A's part is on epoch %s, want %s", rc.CurrentEpoch, epochA)
	}
	if rc, _ := second.Card.Run(runB); rc.CurrentEpoch != epochB {
		t.Errorf("run B's part is on epoch %s, want %s", rc.CurrentEpoch, epochB)
	}
	out = decideCLI(t, s.home, "approve", string(second.ID), "--skip-run", string(runB))
	if !strings.Contains(out, "Left out, still held: "+string(runB)) {
		t.Errorf("approve --skip-run printed %q", out)
	}
	if got := okText(t, await(t, ca)); !strings.HasPrefix(got, "publish server revision A") {
		t.Errorf("status of run A: %q", got)
	}
	held := heldOn(t, s.home, "the run left out", string(runB))
	if len(held) != 1 || !slices.Equal(held[0].Card.RunNames(), []ids.RunID{runB}) || held[0].ID == second.ID {
		t.Fatalf("pending after leaving run B out: %+v, want run B's call alone on a card of its own", held)
	}
	select {
	case r := <-cb:
		t.Fatalf("run B's call was answered though its run was left out: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	if st := waitRun(t, s.home, b.PID(), time.Second, "status", func(gateway.Status) bool { return true }); len(st.Grants) != 0 {
		t.Errorf("run B holds grants %+v after it was left out", st.Grants)
	}
	decideCLI(t, s.home, "approve", string(held[0].ID))
	if got := okText(t, await(t, cb)); !strings.HasPrefix(got, "publish server revision A") {
		t.Errorf("status of run B once its own card was approved: %q", got)
	}
}

// TestAnotherAgentProgramIsNeverFolded: a run whose agent is another
// program (here the shim runs under /bin/sh, so the kernel names sh as
// its agent) calls the same tool on the same code while the first run's
// card is open: it gets a card of its own, and approving the first card
// lets nothing of it through.
func TestAnotherAgentProgramIsNeverFolded(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	shim := s.home.ConnectCommand(pubLabel)
	wrapped := exec.Command("/bin/sh", append([]string{"-c", `"$0" "$@"; exit $?`, shim.Path}, shim.Args[1:]...)...)
	wrapped.Env = shim.Env
	client := mcp.NewClient(&mcp.Implementation{Name: "portcullis-e2e-refresh", Version: "1.0.0"}, nil)
	other, err := harness.Connect(testContext(t, 60*time.Second), client, wrapped, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	ctx := testContext(t, 2*time.Minute)
	for _, s := range []*mcp.ClientSession{a.Session, other.Session} {
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	runA := waitRun(t, s.home, a.PID(), 30*time.Second, "ready", readyOn("")).Run
	ca := asyncCall(t, a.Session, "status", map[string]any{})
	heldOn(t, s.home, "run A", string(runA))
	co := asyncCall(t, other.Session, "status", map[string]any{})
	var reqs []authz.Request
	deadline := time.Now().Add(30 * time.Second)
	for len(reqs) < 2 && time.Now().Before(deadline) {
		reqs = approvals(t, s.home)
		time.Sleep(50 * time.Millisecond)
	}
	if len(reqs) != 2 {
		t.Fatalf("pending %+v, want two cards (another agent program is never folded in)", reqs)
	}
	var mine authz.Request
	for _, r := range reqs {
		if len(r.Card.AlsoRuns) > 0 {
			t.Errorf("card %s decides %v: runs of two agent programs on one card", r.ID, r.Card.RunNames())
		}
		if r.Card.AgentRun == runA {
			mine = r
		} else if r.Card.AgentExe == a.Cmd.Path || !strings.HasSuffix(r.Card.AgentExe, "sh") {
			t.Errorf("the wrapped run's card names agent %q, want the shell", r.Card.AgentExe)
		}
	}
	decideCLI(t, s.home, "approve", string(mine.ID))
	okText(t, await(t, ca))
	select {
	case r := <-co:
		t.Fatalf("the other program's call was answered by run A's approval: %+v", r)
	case <-time.After(500 * time.Millisecond):
	}
	for _, r := range approvals(t, s.home) {
		decideCLI(t, s.home, "deny", string(r.ID))
	}
	if code, _ := refusalOf(t, await(t, co).err); code != -31021 {
		t.Errorf("the other program's call: code %d, want approval_denied", code)
	}
}

// TestApproveDoesNotListHeldToolsAsNotGranted: status is approved for the
// run; the card of a later publish_preview call offers status unticked
// (it is granted already). `portcullis approve` says status was granted
// before, and does not list it among the tools not granted.
func TestApproveDoesNotListHeldToolsAsNotGranted(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	read := asyncCall(t, a.Session, "status", map[string]any{})
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "status", forTool("status", "")).ID))
	okText(t, await(t, read))
	write := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "main"})
	req := waitApproval(t, s.home, "publish_preview", forTool("publish_preview", ""))
	out := decideCLI(t, s.home, "approve", string(req.ID))
	okText(t, await(t, write))
	_, notGranted, _ := strings.Cut(out, "Not granted: ")
	if strings.Contains(notGranted, "status") {
		t.Errorf("approve printed %q: status, granted earlier in the run, is listed as not granted", out)
	}
	if !strings.Contains(out, "Granted before on this epoch: status") || !strings.Contains(notGranted, "slow_publish") {
		t.Errorf("approve printed %q, want status named as granted before and slow_publish as not granted", out)
	}
}

// TestCredentialedRebuildIsOneCard: a server with a launch credential
// (env) is rebuilt, code only (the same catalog). One card asks for both
// the launch of the new code with its credential and the tools chosen for
// the previous code; approving it launches the new code with the secret,
// and the call on the new epoch goes through without a second card.
func TestCredentialedRebuildIsOneCard(t *testing.T) {
	needSecretService(t)
	secret := newSecret(t)
	scope := "notes-token"
	s := newCredsSetup(t, []credsScope{{scope: scope, envVar: "NOTES_TOKEN", secret: secret}}, nil, false)
	connected := make(chan *listChangedAgent, 1)
	go func() { connected <- connectListChanged(t, s.home, credsLabel, "") }()
	a := approveLaunch(t, s.home, string(waitApproval(t, s.home, "the first launch", forIdentity).ID), connected, "first launch")
	epochA := epochOf(t, s.home, a.PID(), "")
	pending := asyncCall(t, a.Session, noteWrite, map[string]any{"text": "a"})
	decideCLI(t, s.home, "approve", string(waitApproval(t, s.home, "note_write", forTool(noteWrite, epochA)).ID))
	if got := okText(t, await(t, pending)); got != wroteWith("A", 1, secret) {
		t.Fatalf("note_write on A: %q", got)
	}

	buildCreds(t, s.binDir, "-X main.buildLabel=rebuilt") // new code, the same tools
	req := waitApproval(t, s.home, "the rebuilt identity", forIdentity)
	lines := strings.Join(req.Card.Lines(), "\n")
	if !slices.Equal(req.Card.ToolScope, []string{noteWrite}) || !strings.Contains(lines, "Tools proposed: "+noteWrite) {
		t.Errorf("the rebuild's launch card proposes %v, want %s with the credential:\n%s", req.Card.ToolScope, noteWrite, lines)
	}
	if out := decideCLI(t, s.home, "approve", string(req.ID)); !strings.Contains(out, noteWrite+" on the process it starts") {
		t.Errorf("approve of the launch printed %q, want it to name the tools granted with it", out)
	}
	epochB := epochOf(t, s.home, a.PID(), epochA)
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	pending = asyncCall(t, a.Session, noteWrite, map[string]any{"text": "b"})
	select {
	case r := <-pending:
		if got := okText(t, r); got != wroteWith("A", 1, secret) {
			t.Errorf("note_write on the rebuilt code: %q", got)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("note_write on %s still waits after the rebuild's one card was approved; pending: %+v", epochB, approvals(t, s.home))
	}
	if p := approvals(t, s.home); len(p) != 0 {
		t.Errorf("after the rebuild's one card, %d more are pending: %+v", len(p), p)
	}
	st := waitRun(t, s.home, a.PID(), time.Second, "status", func(gateway.Status) bool { return true })
	if !slices.ContainsFunc(st.Grants, func(g authz.Grant) bool {
		return string(g.ExecutionEpoch) == epochB && g.Request == req.ID && slices.Contains(g.ToolScope, noteWrite)
	}) {
		t.Errorf("grants %+v, want note_write on %s from the launch card %s", st.Grants, epochB, req.ID)
	}
}
