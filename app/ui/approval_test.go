package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
)

var testNow = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

// request returns a pending request for card, created i seconds after
// testNow, with two minutes to decide.
func request(id string, i int, card authz.Card) authz.Request {
	created := testNow.Add(time.Duration(i) * time.Second)
	return authz.Request{ID: ids.RequestID(id), Card: card, Created: created, Deadline: created.Add(2 * time.Minute)}
}

// newTestWindow returns an approval window over fake approvals holding
// reqs, synced as the tray does when they are raised.
func newTestWindow(t *testing.T, reqs ...authz.Request) (*ApprovalWindow, *fakeApprovals) {
	t.Helper()
	a := test.NewTempApp(t)
	f := newFakeApprovals(reqs...)
	w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
	w.sync(f.Pending())
	return w, f
}

func typeKey(w *ApprovalWindow, k fyne.KeyName) {
	w.win.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: k})
}

// checks returns the tool checkboxes of the card shown, by tool.
func checks(w *ApprovalWindow) map[string]*widget.Check {
	out := map[string]*widget.Check{}
	for _, o := range test.LaidOutObjects(w.win.Content()) {
		if c, ok := o.(*escCheck); ok {
			out[c.Text] = &c.Check
		}
	}
	return out
}

func TestApprovalButtons(t *testing.T) {
	tests := []struct {
		name    string
		act     func(w *ApprovalWindow)
		want    []decision
		visible bool
	}{
		{"approve for this run grants every ticked tool", func(w *ApprovalWindow) { test.Tap(w.approveRun) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust", "inventory_lookup"}, By: "app"}}}, false},
		{"approve for this run with a tool unticked", func(w *ApprovalWindow) {
			checks(w)["inventory_lookup"].SetChecked(false)
			test.Tap(w.approveRun)
		}, []decision{{"apr_1", authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust"}, By: "app"}}}, false},
		{"approve once", func(w *ApprovalWindow) { test.Tap(w.approveOnce) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.ApproveOnce, By: "app"}}}, false},
		{"deny", func(w *ApprovalWindow) { test.Tap(w.deny) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}, false},
		{"escape denies", func(w *ApprovalWindow) { typeKey(w, fyne.KeyEscape) },
			[]decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}, false},
		{"closing the window denies", func(w *ApprovalWindow) { w.closeRequested() },
			[]decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}, false},
		{"enter decides nothing", func(w *ApprovalWindow) {
			typeKey(w, fyne.KeyReturn)
			typeKey(w, fyne.KeyEnter)
		}, nil, true},
		{"the called tool cannot be unticked: approve for this run covers it", func(w *ApprovalWindow) {
			c := checks(w)
			if !c["inventory_adjust"].Disabled() || !c["inventory_adjust"].Checked {
				t.Error("the called tool's check box is not ticked and locked")
			}
			c["inventory_lookup"].SetChecked(false)
			test.Tap(w.approveRun)
		}, []decision{{"apr_1", authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust"}, By: "app"}}}, false},
		{"escape denies when a button has the focus", func(w *ApprovalWindow) {
			w.win.Canvas().Focus(w.approveRun)
			w.win.Canvas().Focused().TypedKey(&fyne.KeyEvent{Name: fyne.KeyEscape})
		}, []decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}, false},
		{"escape denies when a tool check box has the focus", func(w *ApprovalWindow) {
			for _, o := range test.LaidOutObjects(w.win.Content()) {
				if c, ok := o.(*escCheck); ok && c.Text == "inventory_lookup" {
					w.win.Canvas().Focus(c)
				}
			}
			w.win.Canvas().Focused().TypedKey(&fyne.KeyEvent{Name: fyne.KeyEscape})
		}, []decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}, false},
		{"a button with the focus takes no Enter", func(w *ApprovalWindow) {
			w.win.Canvas().Focus(w.approveRun)
			w.win.Canvas().Focused().TypedKey(&fyne.KeyEvent{Name: fyne.KeyReturn})
		}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()))
			if !w.Visible() {
				t.Fatal("the window is not shown for a new request")
			}
			tt.act(w)
			if d := cmp.Diff(tt.want, f.decisions()); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
			if w.Visible() != tt.visible {
				t.Errorf("visible = %v, want %v", w.Visible(), tt.visible)
			}
		})
	}
}

func TestApprovalQueueOfThree(t *testing.T) {
	cards := []authz.Card{rebuildCard(), rebuildCard(), rebuildCard()}
	cards[1].ServerLabel, cards[2].ServerLabel = "echo", "pub"
	w, f := newTestWindow(t, request("apr_1", 0, cards[0]), request("apr_2", 1, cards[1]), request("apr_3", 2, cards[2]))

	type view struct{ Heading, Queue string }
	seen := func() view { return view{w.heading.Text, w.queueLabel.Text} }
	if d := cmp.Diff(view{"An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on inventory-local — new code since you last approved", "1 of 3"}, seen()); d != "" {
		t.Fatalf("first view (-want +got):\n%s", d)
	}
	test.Tap(w.next)
	test.Tap(w.next)
	if d := cmp.Diff(view{"An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on pub — new code since you last approved", "3 of 3"}, seen()); d != "" {
		t.Fatalf("after next, next (-want +got):\n%s", d)
	}
	if !w.next.Disabled() || w.prev.Disabled() {
		t.Errorf("at the last request: next disabled = %v, prev disabled = %v", w.next.Disabled(), w.prev.Disabled())
	}
	test.Tap(w.approveOnce) // decides pub, shows echo (the one before)
	if d := cmp.Diff(view{"An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on echo — new code since you last approved", "2 of 2"}, seen()); d != "" {
		t.Fatalf("after deciding the last (-want +got):\n%s", d)
	}
	test.Tap(w.prev)
	test.Tap(w.deny) // decides inventory-local
	if d := cmp.Diff(view{"An agent (pid 4242) calling itself “claude-code” wants to run `inventory_adjust` on echo — new code since you last approved", ""}, seen()); d != "" {
		t.Fatalf("with one left (-want +got):\n%s", d)
	}
	test.Tap(w.approveRun)
	want := []decision{
		{"apr_3", authz.Decision{Choice: authz.ApproveOnce, By: "app"}},
		{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}},
		{"apr_2", authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust", "inventory_lookup"}, By: "app"}},
	}
	if d := cmp.Diff(want, f.decisions()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	if w.Visible() {
		t.Error("the window stays shown with no request left")
	}
}

// TestApprovalPopsForEveryNewRequest: the window comes forward for each
// request it has not shown before, whichever event brought it (the
// daemon's status change may arrive before the authority's "raised" event,
// and a request may predate the tray), and not again for one it showed.
func TestApprovalPopsForEveryNewRequest(t *testing.T) {
	w, _ := newTestWindow(t)
	if w.Visible() {
		t.Fatal("shown with no request")
	}
	r1 := request("apr_1", 0, rebuildCard())
	w.sync([]authz.Request{r1})
	if !w.Visible() {
		t.Fatal("a first sync with a new request did not show the window")
	}
	test.Tap(w.deny)
	if w.Visible() {
		t.Fatal("still shown after the only request was decided")
	}
	w.sync([]authz.Request{r1}) // a stale view of the same request
	if w.Visible() {
		t.Error("a request already shown and decided popped the window again")
	}
	r2 := request("apr_2", 1, rebuildCard())
	w.sync(nil)
	w.sync([]authz.Request{r2})
	if !w.Visible() {
		t.Error("a second new request did not show the window")
	}
}

// TestApprovalGuard: right after a card appears, its approve buttons
// ignore clicks (a double click, or a click aimed at the card decided just
// before, must not approve a request the person has not seen); Deny is
// never held back.
func TestApprovalGuard(t *testing.T) {
	w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()))
	w.guard = time.Hour
	test.Tap(w.approveRun)
	test.Tap(w.approveOnce)
	if got := f.decisions(); len(got) != 0 {
		t.Fatalf("approvals taken within the guard: %+v", got)
	}
	test.Tap(w.deny)
	want := []decision{{"apr_1", authz.Decision{Choice: authz.Deny, By: "app"}}}
	if d := cmp.Diff(want, f.decisions()); d != "" {
		t.Fatalf("deny within the guard (-want +got):\n%s", d)
	}
	w.guard = time.Millisecond
	time.Sleep(5 * time.Millisecond)
	test.Tap(w.approveOnce)
	want = append(want, decision{"apr_2", authz.Decision{Choice: authz.ApproveOnce, By: "app"}})
	if d := cmp.Diff(want, f.decisions()); d != "" {
		t.Errorf("approval after the guard (-want +got):\n%s", d)
	}
}

// dialogButton returns the button labelled text of the dialog shown over
// w's window.
func dialogButton(t *testing.T, w *ApprovalWindow, text string) *widget.Button {
	t.Helper()
	top := w.win.Canvas().Overlays().Top()
	if top == nil {
		t.Fatal("no dialog is shown")
	}
	for _, o := range test.LaidOutObjects(top) {
		if b, ok := o.(*widget.Button); ok && b.Text == text {
			return b
		}
	}
	t.Fatalf("the dialog has no %q button", text)
	return nil
}

// TestApprovalCloseDeniesAll: closing the window with three requests asks
// first; "Keep open" changes nothing, "Deny all and close" denies every one.
func TestApprovalCloseDeniesAll(t *testing.T) {
	w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()), request("apr_3", 2, rebuildCard()))
	test.Tap(w.next)
	w.closeRequested()
	test.Tap(dialogButton(t, w, closeKeepText))
	if got := f.decisions(); len(got) != 0 || !w.Visible() {
		t.Fatalf("after Keep open: decisions %+v, visible %v; want none, true", got, w.Visible())
	}
	w.closeRequested()
	typeKey(w, fyne.KeyEscape) // Escape over the confirmation keeps the window open
	if got := f.decisions(); len(got) != 0 || !w.Visible() || w.win.Canvas().Overlays().Top() != nil {
		t.Fatalf("after Escape over the confirmation: decisions %+v, visible %v, dialog %v; want none, true, gone", got, w.Visible(), w.win.Canvas().Overlays().Top())
	}
	w.closeRequested()
	test.Tap(dialogButton(t, w, closeDenyText))
	deny := authz.Decision{Choice: authz.Deny, By: "app"}
	want := []decision{{"apr_1", deny}, {"apr_2", deny}, {"apr_3", deny}}
	if d := cmp.Diff(want, f.decisions()); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	if w.Visible() {
		t.Error("the window stays shown after closing")
	}
}

// TestApprovalTimeoutRemoves raises a request on a real authority whose
// timeout is short: the tray opens the window, and when the authority
// denies the request as a timeout the window lets go of it and hides.
func TestApprovalTimeoutRemoves(t *testing.T) {
	a := test.NewTempApp(t)
	auth := authz.New(authz.Options{Timeout: 2 * time.Second}) // time for the window to show first, even on a loaded machine
	notes := &fakeNotifier{added: make(chan struct{}, 1)}
	tr := NewTray(a, Options{Daemon: newFakeDaemon(), Approvals: authorityApprovals{auth}, Notifier: notes, Quit: func() {}})
	refreshed := make(chan [2]any, 16)
	tr.refreshed = func() {
		ids, _ := tr.Approval.Queue()
		refreshed <- [2]any{tr.Approval.Visible(), len(ids)}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-refreshed // Run's first refresh

	id := auth.Raise(rebuildCard())
	wait := func(want [2]any) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case got := <-refreshed:
				if got == want {
					return
				}
			case <-timeout:
				t.Fatalf("the window never reached visible=%v with %v requests", want[0], want[1])
			}
		}
	}
	wait([2]any{true, 1})
	if _, err := auth.Wait(t.Context(), id); err == nil {
		t.Fatal("the request was granted; want a timeout")
	}
	wait([2]any{false, 0})
	if n := len(notes.all()); n != 2 {
		t.Errorf("%d notifications sent, want 2 (the request, then the missed approval)", n)
	}
}

// TestApprovalCardMarkup renders the card of a rebuild (epoch change, disk
// change, catalog diff with three severities, defaults, tools,
// credentials) and compares it with the golden markup in testdata.
func TestApprovalCardMarkup(t *testing.T) {
	w, _ := newTestWindow(t, request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()))
	test.AssertRendersToMarkup(t, "approval_rebuild.xml", w.win.Canvas())
}

// TestApprovalUnrecorded: an approval the audit log could not record grants
// nothing; the window says so instead of vanishing as if it had worked.
func TestApprovalUnrecorded(t *testing.T) {
	w, f := newTestWindow(t, request("apr_1", 0, rebuildCard()))
	f.mu.Lock()
	f.refuse = fmt.Errorf("%w (disk full)", authz.ErrUnrecorded)
	f.mu.Unlock()
	test.Tap(w.approveRun)
	if !w.Visible() || w.unrecorded == nil {
		t.Fatalf("after an unrecorded approval: visible %v, notice %v; want the window and its notice", w.Visible(), w.unrecorded != nil)
	}
	top := w.win.Canvas().Overlays().Top()
	var texts []string
	for _, o := range test.LaidOutObjects(top) {
		if l, ok := o.(*widget.Label); ok {
			texts = append(texts, l.Text)
		}
	}
	if !slices.ContainsFunc(texts, func(s string) bool { return strings.Contains(s, "grants nothing it cannot record") }) {
		t.Errorf("the notice says %q", texts)
	}
	test.Tap(dialogButton(t, w, "OK"))
	if w.Visible() {
		t.Error("the window stays shown after the notice, with nothing left to decide")
	}

	// With another request waiting, Escape dismisses the notice and denies
	// nothing.
	w, f = newTestWindow(t, request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()))
	f.mu.Lock()
	f.refuse = fmt.Errorf("%w (disk full)", authz.ErrUnrecorded)
	f.mu.Unlock()
	w.guard = 0
	test.Tap(w.approveRun)
	typeKey(w, fyne.KeyEscape)
	if got := f.decisions(); len(got) != 1 || !w.Visible() || w.win.Canvas().Overlays().Top() != nil || w.currentID() != "apr_2" {
		t.Errorf("after Escape over the notice: decisions %+v, visible %v, shown %s; want only the approval, apr_2 shown", got, w.Visible(), w.currentID())
	}
}

// TestApprovalAskEveryUse: a card whose credential asks on every use offers
// no approval for the run, only once or deny.
func TestApprovalAskEveryUse(t *testing.T) {
	c := rebuildCard()
	c.AskEveryUse = true
	w, _ := newTestWindow(t, request("apr_1", 0, c), request("apr_2", 1, rebuildCard()))
	if w.approveRun.Visible() || !w.approveOnce.Visible() {
		t.Errorf("ask-every-use card: approve for this run visible %v, approve once visible %v", w.approveRun.Visible(), w.approveOnce.Visible())
	}
	test.Tap(w.next)
	if !w.approveRun.Visible() {
		t.Error("the next, ordinary card has no approve for this run")
	}
}

// TestApprovalClosingFollowsTheQueue: the closing confirmation counts the
// requests waiting now, and goes away when they are decided elsewhere; it
// never comes back over new requests nobody asked to close.
func TestApprovalClosingFollowsTheQueue(t *testing.T) {
	r1, r2, r3 := request("apr_1", 0, rebuildCard()), request("apr_2", 1, rebuildCard()), request("apr_3", 2, rebuildCard())
	w, f := newTestWindow(t, r1, r2, r3)
	w.closeRequested()
	w.sync([]authz.Request{r1, r2}) // apr_3 decided from the command line
	if w.closing == nil || !strings.HasPrefix(w.closingMsg.Text, "2 approval requests are waiting") {
		t.Fatalf("after one request left the queue: dialog %v, text %q", w.closing != nil, w.closingMsg.Text)
	}
	w.sync(nil) // the others too
	if w.Visible() || w.closing != nil {
		t.Fatalf("after the queue emptied: visible %v, dialog %v", w.Visible(), w.closing != nil)
	}
	w.sync([]authz.Request{request("apr_4", 3, rebuildCard()), request("apr_5", 4, rebuildCard())})
	if !w.Visible() || w.win.Canvas().Overlays().Top() != nil {
		t.Errorf("new requests: visible %v, a dialog over them %v; want the window without the old dialog", w.Visible(), w.win.Canvas().Overlays().Top() != nil)
	}
	if got := f.decisions(); len(got) != 0 {
		t.Errorf("decisions %+v, want none from the window", got)
	}
}

// firstCard is the first card of a run for a read call: the called tool
// proposed, the server's other approve tools offered unticked.
func firstCard() authz.Card {
	return authz.Card{Reason: "first use of read_text_file in this agent run", AgentRun: "run1", ServerLabel: "files",
		CurrentEpoch: epochA, CatalogRevision: 1, Tool: "read_text_file", Arguments: json.RawMessage(`{"path":"notes.txt"}`),
		ToolScope: []string{"read_text_file"}, OtherTools: []string{"write_file", "delete_file"}}
}

// TestApprovalDefaultTicks: the window ticks what the card proposes and
// nothing else: the first card of a run its called tool only, a rebuild's
// card the previous choice but not the tool the rebuild added; the person
// widens by ticking; a stale card offers to allow the new code, never
// "Approve once".
func TestApprovalDefaultTicks(t *testing.T) {
	ticks := func(w *ApprovalWindow) map[string]bool {
		out := map[string]bool{}
		for name, c := range checks(w) {
			out[name] = c.Checked
		}
		return out
	}
	stale := firstCard()
	stale.Stale, stale.PreviousEpoch, stale.CurrentEpoch = true, epochA, epochB
	tests := []struct {
		name      string
		card      authz.Card
		wantTicks map[string]bool
		act       func(w *ApprovalWindow)
		want      authz.Decision
	}{
		{"first card: approve grants the called tool only", firstCard(),
			map[string]bool{"read_text_file": true, "write_file": false, "delete_file": false},
			func(w *ApprovalWindow) { test.Tap(w.approveRun) },
			authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read_text_file"}, By: "app"}},
		{"first card widened by a tick", firstCard(),
			map[string]bool{"read_text_file": true, "write_file": false, "delete_file": false},
			func(w *ApprovalWindow) {
				checks(w)["write_file"].SetChecked(true)
				test.Tap(w.approveRun)
			},
			authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read_text_file", "write_file"}, By: "app"}},
		{"rebuild card: the new tool is not ticked", rebuildCard(),
			map[string]bool{"inventory_adjust": true, "inventory_lookup": true, "inventory_purge": false},
			func(w *ApprovalWindow) { test.Tap(w.approveRun) },
			authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust", "inventory_lookup"}, By: "app"}},
		{"stale card: allow the new code for this run", stale,
			map[string]bool{"read_text_file": true, "write_file": false, "delete_file": false},
			func(w *ApprovalWindow) {
				if w.Button(approveOnceText) != nil || w.approveOnce.Visible() {
					t.Error("a stale card offers Approve once")
				}
				b := w.Button(allowNewCodeText)
				if b == nil {
					t.Fatalf("no %q button on a stale card", allowNewCodeText)
				}
				test.Tap(b)
			},
			authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read_text_file"}, By: "app"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, f := newTestWindow(t, request("apr_1", 0, tt.card))
			if d := cmp.Diff(tt.wantTicks, ticks(w)); d != "" {
				t.Errorf("ticks as shown (-want +got):\n%s", d)
			}
			tt.act(w)
			if d := cmp.Diff([]decision{{"apr_1", tt.want}}, f.decisions()); d != "" {
				t.Errorf("decisions (-want +got):\n%s", d)
			}
		})
	}
	// After a stale card, a plain card has its buttons back.
	w, _ := newTestWindow(t, request("apr_1", 0, stale), request("apr_2", 1, firstCard()))
	test.Tap(w.Button(allowNewCodeText))
	if w.Button(approveOnceText) == nil || w.Button(approveRunText) == nil {
		t.Error("the card after a stale one lacks Approve once or Approve for this run")
	}
}

// TestScopeText: the line beside the buttons says what the run approval
// grants with the ticks as they are.
func TestScopeText(t *testing.T) {
	stale := firstCard()
	stale.Stale = true
	tests := []struct {
		card   authz.Card
		ticked []string
		want   string
	}{
		{firstCard(), []string{"read_text_file"}, "Scope: “Approve for this run” grants read_text_file (2 more not ticked)"},
		{firstCard(), []string{"read_text_file", "write_file", "delete_file"}, "Scope: “Approve for this run” grants read_text_file, write_file, delete_file"},
		{stale, []string{"read_text_file"}, "Scope: “Allow the new code for this run” grants read_text_file (2 more not ticked)"},
		{launchCard(), nil, "Scope: “Approve for this run” lets this code receive inventory-api-staging at its launches in this agent run; “Approve once”, at this launch only"},
		{authz.Card{ServerLabel: "x"}, nil, ""},
		{authz.Card{Tool: "drop\x1b[5Dread", ToolScope: []string{"drop\x1b[5Dread"}, OtherTools: []string{"read", "rеad"}}, []string{"drop\x1b[5Dread", "rеad"},
			`Scope: “Approve for this run” grants drop\x1b[5Dread, rеad ⚠ mixes Cyrillic and Latin letters; looks like read (1 more not ticked)`},
	}
	for _, tt := range tests {
		if got := scopeText(tt.card, tt.ticked); got != tt.want {
			t.Errorf("scopeText(%s, %v) = %q, want %q", tt.card.Tool, tt.ticked, got, tt.want)
		}
	}
	// In the window, it follows the ticks.
	w, _ := newTestWindow(t, request("apr_1", 0, firstCard()))
	checks(w)["delete_file"].SetChecked(true)
	if got, want := w.scope.Text, "Scope: “Approve for this run” grants read_text_file, delete_file (1 more not ticked)"; got != want {
		t.Errorf("scope line after ticking delete_file: %q, want %q", got, want)
	}
}
