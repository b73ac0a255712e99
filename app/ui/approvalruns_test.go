package ui

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
)

// twoRunCard is the card of one rebuild that two runs of claude ask about,
// each on its own epoch of the same code.
func twoRunCard() authz.Card {
	c := rebuildCard()
	c.Code = "sha256:code"
	c.AlsoRuns = []authz.RunCall{{AgentRun: "01JQ7R00000000000000RUN002", AgentPID: 4243, CurrentEpoch: "01JQ7R0000000000000EPOCH9B",
		Tool: c.Tool, Arguments: c.Arguments, ArgsDigest: "sha256:other"}}
	return c
}

// TestApprovalRunsOfOneChange: a card of two runs lists both, each ticked;
// approving answers the runs ticked (unticking one leaves it out, so it
// stays held), with no run ticked nothing can be approved, and "This
// code, every run of claude" sends approve-code for the ticked tools and
// runs. A card of one run sends no runs.
func TestApprovalRunsOfOneChange(t *testing.T) {
	runA, runB := ids.RunID("01JQ7R00000000000000RUN001"), ids.RunID("01JQ7R00000000000000RUN002")
	tools := []string{"inventory_adjust", "inventory_lookup"}
	runCheck := func(w *ApprovalWindow, run string) *escCheck {
		for _, o := range test.LaidOutObjects(w.win.Content()) {
			if c, ok := o.(*escCheck); ok && strings.HasPrefix(c.Text, "run "+shortID(run)) {
				return c
			}
		}
		t.Fatalf("no check box for run %s", run)
		return nil
	}
	for _, tc := range []struct {
		name string
		act  func(w *ApprovalWindow)
		want []decision
	}{
		{"approve for both runs", func(w *ApprovalWindow) { test.Tap(w.approveRun) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.ApproveRun, Tools: tools, Runs: []ids.RunID{runA, runB}, By: "app"}}}},
		{"run B left out", func(w *ApprovalWindow) {
			runCheck(w, string(runB)).SetChecked(false)
			test.Tap(w.approveRun)
		}, []decision{{"apr_1", authz.Decision{Choice: authz.ApproveRun, Tools: tools, Runs: []ids.RunID{runA}, By: "app"}}}},
		{"no run ticked approves nothing", func(w *ApprovalWindow) {
			runCheck(w, string(runA)).SetChecked(false)
			runCheck(w, string(runB)).SetChecked(false)
			if !w.approveRun.Disabled() || !w.approveCode.Disabled() || !w.approveOnce.Disabled() {
				t.Error("approve buttons enabled with no run ticked")
			}
			w.decide(authz.ApproveRun)
		}, nil},
		{"this code, every run of claude", func(w *ApprovalWindow) {
			if w.approveCode.Hidden || w.approveCode.Text != "This code, every run of claude" {
				t.Errorf("code button %q hidden=%v", w.approveCode.Text, w.approveCode.Hidden)
			}
			test.Tap(w.approveCode)
		}, []decision{{"apr_1", authz.Decision{Choice: authz.ApproveCode, Tools: tools, Runs: []ids.RunID{runA, runB}, By: "app"}}}},
		{"deny answers the whole card", func(w *ApprovalWindow) { test.Tap(w.deny) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, f := newTestWindow(t, request("apr_1", 0, twoRunCard()))
			w.guard = 0
			if w.runs.Hidden || len(w.runs.Objects) != 3 {
				t.Fatalf("runs box hidden=%v with %d objects, want a heading and two runs", w.runs.Hidden, len(w.runs.Objects))
			}
			tc.act(w)
			if d := cmp.Diff(tc.want, f.decisions()); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
	w, _ := newTestWindow(t, request("apr_1", 0, rebuildCard()))
	if !w.runs.Hidden || !w.approveCode.Hidden {
		t.Errorf("a card of one run without a measured code shows runs (%v) or the code choice (%v)", !w.runs.Hidden, !w.approveCode.Hidden)
	}
}
