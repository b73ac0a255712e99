package authz

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/ids"
)

// codeCard is the card of a call of tool by run (agent program exe) on
// epoch, which runs code; the catalog offers greet and echo.
func codeCard(run ids.RunID, exe string, epoch ids.EpochID, code, tool string) Card {
	return Card{Reason: "server execution epoch changed", AgentRun: run, AgentExe: exe, ServerLabel: "srv",
		PreviousEpoch: ids.EpochID("OLD-" + run), CurrentEpoch: epoch, Code: code, CatalogRevision: 2, ApprovedRevision: 2,
		Tool: tool, ArgsDigest: "sha256:" + string(run) + tool, ToolScope: []string{tool}, OtherTools: others(tool),
		ToolContracts: map[string]string{"greet": "sha256:g", "echo": "sha256:e"}}
}

func others(tool string) []string {
	return slices.DeleteFunc([]string{"greet", "echo"}, func(t string) bool { return t == tool })
}

// waitRun waits for run's outcome on request id, bounded.
func waitRun(t *testing.T, a *Authority, id ids.RequestID, run ids.RunID) (*Grant, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.WaitRun(ctx, id, run)
}

// TestTwoRunsOfOneChangeShareOneCard: after one rebuild, the cards of two
// runs of the same agent program whose epochs run the same code fold into
// one pending card that lists both runs and calls; approving it makes one
// grant per run, each bound to that run's epoch and covering its own call.
func TestTwoRunsOfOneChangeShareOneCard(t *testing.T) {
	var rec recorder
	a := New(rec.options(Options{}))
	first := a.Raise(codeCard("runA", "/usr/bin/agent", "EA", "sha256:new", "greet"))
	second := a.Raise(codeCard("runB", "/usr/bin/agent", "EB", "sha256:new", "echo"))
	pending := a.Pending()
	if len(pending) != 1 || pending[0].ID != second {
		t.Fatalf("pending %d requests (%v), want the one merged card %s", len(pending), pending, second)
	}
	c := pending[0].Card
	if !slices.Equal(c.RunNames(), []ids.RunID{"runA", "runB"}) || !c.Shows("runA", "greet", "sha256:runAgreet") || !c.Shows("runB", "echo", "sha256:runBecho") {
		t.Fatalf("merged card runs %v, want runA's greet and runB's echo", c.Runs())
	}
	if id, ok := a.Find("runA", "EA", "greet", nil, "sha256:runAgreet"); !ok || id != second {
		t.Errorf("Find of runA's call = %q %v, want the merged card", id, ok)
	}
	if err := a.Decide(first, Decision{Choice: ApproveRun}); !errors.Is(err, ErrNoRequest) {
		t.Errorf("deciding the card merged away: %v, want it gone (a decision answers the card the person saw)", err)
	}
	if err := a.Decide(second, Decision{Choice: ApproveRun, By: "cli"}); err != nil {
		t.Fatal(err)
	}
	// runA waited on the first card: it follows the merge.
	ga, err := waitRun(t, a, first, "runA")
	if err != nil || ga.AgentRun != "runA" || ga.ExecutionEpoch != "EA" || !slices.Contains(ga.ToolScope, "greet") {
		t.Fatalf("runA: %+v %v, want a grant of greet on EA", ga, err)
	}
	gb, err := waitRun(t, a, second, "runB")
	if err != nil || gb.AgentRun != "runB" || gb.ExecutionEpoch != "EB" || !slices.Contains(gb.ToolScope, "echo") {
		t.Fatalf("runB: %+v %v, want a grant of echo on EB", gb, err)
	}
	if a.Check("runA", "EB", "greet", nil) != nil || a.Check("runB", "EA", "echo", nil) != nil {
		t.Error("a grant covers another run's epoch")
	}
	if a.Check("runA", "EA", "greet", nil) == nil || a.Check("runB", "EB", "echo", nil) == nil {
		t.Error("a run's own call is not covered")
	}
	if n := len(rec.granted); n != 2 {
		t.Errorf("%d grants recorded, want one per run", n)
	}
}

// TestFoldNeverCrossesProgramOrCode: a card of a run of another agent
// program, or of an epoch whose code differs, never joins a pending card;
// nor does a card that asks on every use or one without a measured code.
func TestFoldNeverCrossesProgramOrCode(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Card)
	}{
		{"another agent program", func(c *Card) { c.AgentExe = "/usr/bin/other-agent" }},
		{"different measured code", func(c *Card) { c.Code = "sha256:other" }},
		{"another catalog revision", func(c *Card) { c.CatalogRevision = 3 }},
		{"another server", func(c *Card) { c.ServerLabel = "srv2" }},
		{"no code measured", func(c *Card) { c.Code = "" }},
		{"asks on every use", func(c *Card) { c.AskEveryUse = true }},
		{"other credentials", func(c *Card) { c.CredentialScope = []string{"token"} }},
		{"another contract shown", func(c *Card) { c.ToolContracts = map[string]string{"greet": "sha256:g2"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Options{})
			first := a.Raise(codeCard("runA", "/usr/bin/agent", "EA", "sha256:new", "greet"))
			n := codeCard("runB", "/usr/bin/agent", "EB", "sha256:new", "greet")
			tc.edit(&n)
			second := a.Raise(n)
			if second == first || len(a.Pending()) != 2 {
				t.Fatalf("pending %v, want two separate cards", a.Pending())
			}
			for _, r := range a.Pending() {
				if len(r.Card.AlsoRuns) > 0 {
					t.Errorf("card %s decides %v", r.ID, r.Card.RunNames())
				}
			}
		})
	}
}

// TestLeftOutRunStaysHeld: the person unticks one run of a merged card:
// the other run is granted, the unticked one is not, and its call stays
// held on a card of its own (with the original deadline) that a later
// decision can deny.
func TestLeftOutRunStaysHeld(t *testing.T) {
	a := New(Options{})
	a.Raise(codeCard("runA", "/usr/bin/agent", "EA", "sha256:new", "greet"))
	id := a.Raise(codeCard("runB", "/usr/bin/agent", "EB", "sha256:new", "greet"))
	deadline := a.Pending()[0].Deadline
	if err := a.Decide(id, Decision{Choice: ApproveRun, Runs: []ids.RunID{"runX"}}); !errors.Is(err, ErrRunNotOnCard) {
		t.Errorf("a run not on the card: %v, want ErrRunNotOnCard", err)
	}
	if err := a.Decide(id, Decision{Choice: ApproveRun, Runs: []ids.RunID{"runA"}}); err != nil {
		t.Fatal(err)
	}
	if g, err := waitRun(t, a, id, "runA"); err != nil || g.AgentRun != "runA" {
		t.Fatalf("runA: %+v %v", g, err)
	}
	if a.Check("runB", "EB", "greet", nil) != nil {
		t.Fatal("the run left out was granted")
	}
	p := a.Pending()
	if len(p) != 1 || !slices.Equal(p[0].Card.RunNames(), []ids.RunID{"runB"}) || p[0].Card.CurrentEpoch != "EB" || !p[0].Deadline.Equal(deadline) {
		t.Fatalf("pending %+v, want runB's call held with the same deadline", p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.WaitRun(ctx, id, "runB"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("runB's call: %v, want it still waiting", err)
	}
	if err := a.Decide(p[0].ID, Decision{Choice: Deny}); err != nil {
		t.Fatal(err)
	}
	if _, err := waitRun(t, a, id, "runB"); !errors.Is(err, ErrDenied) {
		t.Errorf("runB after its card was denied: %v", err)
	}
}

// TestWithdrawingOneRunKeepsTheOther: one run's call is cancelled (or its
// epoch ends) while a merged card is open: only its part is withdrawn.
func TestWithdrawingOneRunKeepsTheOther(t *testing.T) {
	a := New(Options{})
	first := a.Raise(codeCard("runA", "/usr/bin/agent", "EA", "sha256:new", "greet"))
	a.Raise(codeCard("runB", "/usr/bin/agent", "EB", "sha256:new", "greet"))
	if err := a.WithdrawRun(first, "runA", "the agent cancelled the call"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitRun(t, a, first, "runA"); !errors.Is(err, ErrWithdrawn) {
		t.Errorf("runA: %v, want withdrawn", err)
	}
	p := a.Pending()
	if len(p) != 1 || !slices.Equal(p[0].Card.RunNames(), []ids.RunID{"runB"}) {
		t.Fatalf("pending %+v, want runB's part only", p)
	}
	if ids := a.WithdrawEpoch("runB", "EB", "the server was replaced"); len(ids) != 1 || len(a.Pending()) != 0 {
		t.Errorf("WithdrawEpoch of runB: %v, pending %v", ids, a.Pending())
	}
}

// TestApproveCodeCoversEveryRunOfTheProgramForThisCode: "this code, for
// every run of AGENT" grants the runs on the card and, later, another run
// of the same program on an epoch of the same code, without a card; not a
// run of another program, not another contract, and never new code (which
// also drops the approval).
func TestApproveCodeCoversEveryRunOfTheProgramForThisCode(t *testing.T) {
	var rec recorder
	a := New(rec.options(Options{}))
	events, cancel := a.Subscribe()
	defer cancel()
	id := a.Raise(codeCard("runA", "/usr/bin/agent", "EA", "sha256:new", "greet"))
	if err := a.Decide(id, Decision{Choice: ApproveCode, Tools: []string{"greet", "echo"}}); err != nil {
		t.Fatal(err)
	}
	if g, err := waitRun(t, a, id, "runA"); err != nil || g.ExecutionEpoch != "EA" {
		t.Fatalf("runA: %+v %v", g, err)
	}
	// A second run of the same program on the same code: granted at once.
	later := a.Raise(codeCard("runC", "/usr/bin/agent", "EC", "sha256:new", "echo"))
	g, err := waitRun(t, a, later, "runC")
	if err != nil || g.AgentRun != "runC" || g.ExecutionEpoch != "EC" || !slices.Contains(g.ToolScope, "echo") {
		t.Fatalf("runC under the standing approval: %+v %v", g, err)
	}
	if len(a.Pending()) != 0 {
		t.Errorf("pending %v, want none", a.Pending())
	}
	for len(events) > 0 {
		if ev := <-events; ev.Request.ID == later {
			t.Errorf("the request granted by the standing approval was shown: %+v", ev)
		}
	}
	// Another program, or another contract: asked.
	other := a.Raise(codeCard("runD", "/usr/bin/other-agent", "ED", "sha256:new", "greet"))
	changed := codeCard("runE", "/usr/bin/agent", "EE", "sha256:new", "greet")
	changed.ToolContracts = map[string]string{"greet": "sha256:g2"}
	rewritten := a.Raise(changed)
	if len(a.Pending()) != 2 {
		t.Fatalf("pending %v, want the other program's and the other contract's cards", a.Pending())
	}
	_ = a.Withdraw(other, "test")
	_ = a.Withdraw(rewritten, "test")
	// New code: asked, and the approval is gone for the old code too.
	a.Raise(codeCard("runF", "/usr/bin/agent", "EF", "sha256:newer", "greet"))
	a.Raise(codeCard("runG", "/usr/bin/agent", "EG", "sha256:new", "greet"))
	if n := len(a.Pending()); n != 2 {
		t.Errorf("pending %d after new code, want 2 (new code asks, and the old approval is dropped)", n)
	}
	if err := a.Decide(a.Raise(Card{AgentRun: "r", ServerLabel: "srv", Identity: "sha256:x", Code: "sha256:x", CredentialScope: []string{"t"}}), Decision{Choice: ApproveCode}); !errors.Is(err, ErrBadChoice) {
		t.Errorf("approve-code of a launch card: %v, want ErrBadChoice", err)
	}
}

// TestLaunchCardCarriesTheTools: after a rebuild of a server with a launch
// credential, the launch card proposes the tools chosen for the previous
// epoch; its approval grants them on the epoch the launch starts, once.
func TestLaunchCardCarriesTheTools(t *testing.T) {
	var rec recorder
	a := New(rec.options(Options{}))
	first := toolCard("r", "E1", "greet", []string{"greet"})
	first.ToolContracts = map[string]string{"greet": "sha256:g"}
	grantFor(t, a, first, Decision{Choice: ApproveRun})
	launch := a.ProposeLaunch(Card{AgentRun: "r", ServerLabel: "srv", Identity: "sha256:new", CredentialScope: []string{"token"}})
	if !slices.Equal(launch.ToolScope, []string{"greet"}) || launch.ToolContracts["greet"] != "sha256:g" {
		t.Fatalf("launch card proposes %v %v, want greet with its contract", launch.ToolScope, launch.ToolContracts)
	}
	g := grantFor(t, a, launch, Decision{Choice: ApproveRun})
	if a.Check("r", "E2", "greet", nil) != nil {
		t.Fatal("the launch's tools hold before the launch started")
	}
	if err := a.BindLaunch("r", g.ID, "E2"); err != nil {
		t.Fatal(err)
	}
	a.VoidEpoch("r", "E2", "new epoch")
	if got := a.Check("r", "E2", "greet", nil); got == nil || got.Contract("greet") != "sha256:g" {
		t.Fatalf("greet on the launched epoch: %+v", got)
	}
	if !a.IdentityApproved("r", "sha256:new", []string{"token"}) {
		t.Error("the launch approval no longer counts for its identity")
	}
	if err := a.BindLaunch("r", g.ID, "E3"); err != nil || a.Check("r", "E3", "greet", nil) != nil {
		t.Errorf("a second launch of the same code got the tools again: %v", err)
	}
	if n := len(rec.granted); n != 3 {
		t.Errorf("%d grants recorded (first card, launch, bound tools), want 3", n)
	}
}
