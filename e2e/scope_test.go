package e2e

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/gateway"
	"github.com/portcullis/portcullis/internal/harness"
)

// The scope tests run the publish server with every tool under policy
// approve (the default): status (readOnlyHint), publish_preview,
// slow_publish, add_tool; revRollback adds rollback (destructiveHint) on
// top of revision B.
const revRollback = publishRevB + " -X main.destructiveTool=rollback"

// newScopeSetup builds revision A of the publish server, registers it with
// no policy set (every tool asks for approval) and starts a daemon.
func newScopeSetup(t *testing.T) *publishSetup {
	t.Helper()
	s := &publishSetup{home: newHome(t), binDir: t.TempDir()}
	s.callLog = filepath.Join(t.TempDir(), "calls.jsonl")
	s.bin, _ = buildPublish(t, s.binDir, publishRevA)
	if err := s.home.AddServer(testContext(t, 30*time.Second), pubLabel,
		[]string{"--cwd", s.binDir, "--env", "PUBLISH_CALL_LOG=" + s.callLog}, s.bin); err != nil {
		t.Fatal(err)
	}
	s.daemon = startDaemon(t, s.home)
	return s
}

// callsOf counts the calls of tool the publish servers received.
func callsOf(t *testing.T, s *publishSetup, tool string) int {
	t.Helper()
	n := 0
	for _, c := range readCalls(t, s.callLog) {
		if c.Tool == tool {
			n++
		}
	}
	return n
}

// grantedTools is the union of the tool scopes of the live grants of run.
func grantedTools(r gateway.Status) []string {
	var out []string
	for _, g := range r.Grants {
		for _, tool := range g.ToolScope {
			if !slices.Contains(out, tool) {
				out = append(out, tool)
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestApprovingAReadToolGrantsOnlyIt: the first card of a run, for a call
// of the read-only status tool, proposes status alone and offers the other
// tools unticked; `portcullis approve ID` grants status only, says so, and
// a publish_preview call afterwards waits for a card of its own (denied
// here: it never reaches the server).
func TestApprovingAReadToolGrantsOnlyIt(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	read := asyncCall(t, a.Session, "status", map[string]any{})
	req := waitApproval(t, s.home, "status", forTool("status", ""))
	if !slices.Equal(req.Card.ToolScope, []string{"status"}) {
		t.Errorf("proposed scope %v, want [status]", req.Card.ToolScope)
	}
	for _, tool := range []string{"publish_preview", "slow_publish", "add_tool"} {
		if !slices.Contains(req.Card.OtherTools, tool) {
			t.Errorf("the card does not offer %s to tick (other tools %v)", tool, req.Card.OtherTools)
		}
	}
	out := decideCLI(t, s.home, "approve", string(req.ID))
	if !strings.Contains(out, ": status. Not granted: ") || !strings.Contains(out, "publish_preview") {
		t.Errorf("approve printed %q, want it to say status only was granted", out)
	}
	if got := okText(t, await(t, read)); !strings.HasPrefix(got, "publish server revision A") {
		t.Errorf("status: %q", got)
	}
	run := waitRun(t, s.home, a.PID(), 10*time.Second, "a grant", func(r gateway.Status) bool { return len(r.Grants) > 0 })
	if got := grantedTools(run); !slices.Equal(got, []string{"status"}) {
		t.Errorf("granted tools %v, want [status]", got)
	}

	write := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "main"})
	own := waitApproval(t, s.home, "publish_preview", forTool("publish_preview", ""))
	if own.ID == req.ID {
		t.Fatal("publish_preview went on the status card")
	}
	decideCLI(t, s.home, "deny", string(own.ID))
	r := await(t, write)
	if code, ref := refusalOf(t, r.err); code != -31021 || ref.Error != control.ApprovalDenied {
		t.Errorf("publish_preview after approving status: code %d %+v, want approval_denied", code, ref)
	}
	if n := callsOf(t, s, "publish_preview"); n != 0 {
		t.Errorf("publish_preview reached the server %d times, want 0", n)
	}
}

// TestRebuildsNewDestructiveToolIsNotProposed: on A the person approves
// status and, ticked on top, publish_preview; the rebuild B changes
// publish_preview and adds the destructive rollback. The first card on B
// proposes status and publish_preview (publish_preview marked changed),
// offers rollback unticked and marked new; `approve ID` grants those two,
// and a rollback call then waits for its own card.
func TestRebuildsNewDestructiveToolIsNotProposed(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	ctx := testContext(t, 3*time.Minute)
	if _, err := a.Session.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	first := asyncCall(t, a.Session, "status", map[string]any{})
	reqA := waitApproval(t, s.home, "status on A", forTool("status", ""))
	if out := decideCLI(t, s.home, "approve", string(reqA.ID), "--tools", "publish_preview"); !strings.Contains(out, "status, publish_preview") {
		t.Errorf("approve --tools printed %q", out)
	}
	okText(t, await(t, first))
	before := waitRun(t, s.home, a.PID(), 10*time.Second, "ready", readyOn(""))

	s.rebuild(t, revRollback)
	waitRun(t, s.home, a.PID(), buildWait, "ready on a new epoch", readyOn(string(before.Epoch)))
	a.waitListChanged(t, 1, 30*time.Second)
	tools, err := a.Session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "rollback" }) {
		t.Fatalf("revision B lists no rollback: %+v", tools.Tools)
	}
	second := asyncCall(t, a.Session, "status", map[string]any{})
	reqB := waitApproval(t, s.home, "status on B", func(c authz.Card) bool { return forTool("status", "")(c) && c.CurrentEpoch != before.Epoch })
	c := reqB.Card
	if !slices.Equal(c.ToolScope, []string{"publish_preview", "status"}) && !slices.Equal(c.ToolScope, []string{"status", "publish_preview"}) {
		t.Errorf("proposed scope on B %v, want status and publish_preview", c.ToolScope)
	}
	if slices.Contains(c.ToolScope, "rollback") || !slices.Contains(c.OtherTools, "rollback") || !slices.Contains(c.NewTools, "rollback") {
		t.Errorf("rollback on the card of B: proposed %v, other %v, new %v; want offered unticked and marked new", c.ToolScope, c.OtherTools, c.NewTools)
	}
	if !slices.Contains(c.ChangedTools, "publish_preview") {
		t.Errorf("changed tools %v, want publish_preview marked", c.ChangedTools)
	}
	if lines := strings.Join(c.Lines(), "\n"); !strings.Contains(lines, "rollback (new)") {
		t.Errorf("the text card does not mark rollback new:\n%s", lines)
	}
	decideCLI(t, s.home, "approve", string(reqB.ID))
	if got := okText(t, await(t, second)); !strings.HasPrefix(got, "publish server revision B") {
		t.Errorf("status on B: %q", got)
	}
	run := waitRun(t, s.home, a.PID(), 10*time.Second, "a grant on B", func(r gateway.Status) bool { return len(r.Grants) > 0 })
	if got := grantedTools(run); !slices.Equal(got, []string{"publish_preview", "status"}) {
		t.Errorf("granted on B %v, want [publish_preview status]", got)
	}
	destroy := asyncCall(t, a.Session, "rollback", map[string]any{})
	own := waitApproval(t, s.home, "rollback", forTool("rollback", ""))
	decideCLI(t, s.home, "deny", string(own.ID))
	if code, _ := refusalOf(t, await(t, destroy).err); code != -31021 {
		t.Errorf("rollback: code %d, want approval_denied", code)
	}
	if n := callsOf(t, s, "rollback"); n != 0 {
		t.Errorf("rollback reached the server %d times, want 0", n)
	}
}

// TestCallWhileACardIsOpenWaitsForItsOwnCard: a second publish_preview call
// (branch production-hotfix) arrives while the card of the first (branch
// main) is open. It gets a card of its own; approving the first card for the
// run with every tool ticked lets the first call go and not the second,
// whose card is still pending; denied, it never reaches the server.
func TestCallWhileACardIsOpenWaitsForItsOwnCard(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	first := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "main"})
	card1 := waitApproval(t, s.home, "the first call", forTool("publish_preview", ""))
	second := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "production-hotfix"})
	card2 := waitApproval(t, s.home, "the second call", func(c authz.Card) bool {
		return forTool("publish_preview", "")(c) && strings.Contains(string(c.Arguments), "production-hotfix")
	})
	if card2.ID == card1.ID || strings.Contains(string(card1.Card.Arguments), "production-hotfix") {
		t.Fatalf("the second call shares the first card: %+v", card1)
	}
	decideCLI(t, s.home, "approve", string(card1.ID), "--all")
	if got := okText(t, await(t, first)); got != "revision A published branch main to preview" {
		t.Errorf("first call: %q", got)
	}
	pending := approvals(t, s.home)
	if !slices.ContainsFunc(pending, func(r authz.Request) bool { return r.ID == card2.ID }) {
		t.Fatalf("the second call's card is gone after approving the first: %+v", pending)
	}
	select {
	case r := <-second:
		t.Fatalf("the second call was answered before its own card was decided: %+v", r)
	default:
	}
	decideCLI(t, s.home, "deny", string(card2.ID))
	if code, _ := refusalOf(t, await(t, second).err); code != -31021 {
		t.Errorf("second call: code %d, want approval_denied", code)
	}
	for _, c := range readCalls(t, s.callLog) {
		if strings.Contains(string(c.Args), "production-hotfix") {
			t.Errorf("the second call reached the server: %+v", c)
		}
	}
}

// TestEndedEpochWithdrawsTheWaitingRequest: a call waits for a person; the
// server is replaced (`portcullis restart`). The request is withdrawn at
// once: gone from the approvals, named with the reason in `status --json`,
// approval_withdrawn in the audit log (no approval_denied); the call gets
// epoch_ended; `portcullis approve ID` says it was withdrawn and why, fails,
// and grants nothing.
func TestEndedEpochWithdrawsTheWaitingRequest(t *testing.T) {
	s := newScopeSetup(t)
	a := connectListChanged(t, s.home, pubLabel, "")
	if _, err := a.Session.ListTools(testContext(t, time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	call := asyncCall(t, a.Session, "publish_preview", map[string]any{"branch": "main"})
	req := waitApproval(t, s.home, "publish_preview", forTool("publish_preview", ""))
	if _, err := s.home.Run(testContext(t, 30*time.Second), "restart", pubLabel); err != nil {
		t.Fatal(err)
	}
	code, ref := refusalOf(t, await(t, call).err)
	if ref.Error != control.EpochEnded {
		t.Errorf("the waiting call: code %d %+v, want epoch_ended", code, ref)
	}
	waitApprovalGone(t, s.home, string(req.ID))
	run := waitRun(t, s.home, a.PID(), 10*time.Second, "the withdrawal in status", func(r gateway.Status) bool { return len(r.Withdrawn) > 0 })
	if w := run.Withdrawn[0]; w.Request != req.ID || !strings.Contains(w.Reason, "replaced") || !strings.Contains(w.Reason, string(req.Card.CurrentEpoch)) {
		t.Errorf("status withdrawn %+v, want %s with the reason", run.Withdrawn, req.ID)
	}
	r, err := s.home.RunAtTerminal(testContext(t, 30*time.Second), "approve", string(req.ID))
	var ee *harness.ExitError
	if !errors.As(err, &ee) || !strings.Contains(r.Stderr, "withdrawn") || !strings.Contains(r.Stderr, "replaced") || !strings.Contains(r.Stderr, "nothing was granted") {
		t.Errorf("approve of the withdrawn request: %v, stdout %q, stderr %q; want a failure saying it was withdrawn and why", err, r.Stdout, r.Stderr)
	}
	if run := waitRun(t, s.home, a.PID(), 10*time.Second, "known", func(gateway.Status) bool { return true }); len(run.Grants) != 0 {
		t.Errorf("grants after approving the withdrawn request: %+v", run.Grants)
	}
	var withdrawn, denied int
	for _, e := range auditEvents(t, s.home) {
		var f struct {
			Request, Reason string
		}
		_ = json.Unmarshal(e.Fields, &f)
		if f.Request != string(req.ID) {
			continue
		}
		switch e.Type {
		case audit.TypeApprovalWithdrawn:
			withdrawn++
			if !strings.Contains(f.Reason, "replaced") {
				t.Errorf("approval_withdrawn reason %q", f.Reason)
			}
		case audit.TypeApprovalDenied, audit.TypeApprovalGranted:
			denied++
		}
	}
	if withdrawn != 1 || denied != 0 {
		t.Errorf("audit: %d approval_withdrawn, %d approval_denied/granted for %s; want 1 and 0", withdrawn, denied, req.ID)
	}
	if n := callsOf(t, s, "publish_preview"); n != 0 {
		t.Errorf("publish_preview reached a server %d times, want 0", n)
	}
}
