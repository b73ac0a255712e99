package ui

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/ids"
)

// lifeTray is a tray over a real authority with a short timeout, running,
// with a hook telling each refresh.
func lifeTray(t *testing.T, timeout time.Duration) (*Tray, *authz.Authority, *fakeNotifier, chan struct{}) {
	t.Helper()
	a := test.NewTempApp(t)
	auth := authz.New(authz.Options{Timeout: timeout})
	notes := &fakeNotifier{added: make(chan struct{}, 8)}
	tr := NewTray(a, Options{Daemon: newFakeDaemon(), Approvals: authorityApprovals{auth}, Notifier: notes, Quit: func() {}})
	tr.Approval.guard = 0 // the test clicks as soon as the card shows
	refreshed := make(chan struct{}, 64)
	tr.refreshed = func() { refreshed <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-refreshed // Run's first refresh
	return tr, auth, notes, refreshed
}

// until waits, refresh by refresh, for cond (bounded).
func until(t *testing.T, refreshed chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !cond() {
		select {
		case <-refreshed:
		case <-deadline:
			t.Fatalf("never: %s", what)
		}
	}
}

// TestNotificationsFollowTheRequest: the notification of a request is
// withdrawn when the request is approved or denied (in the window or from
// the command line), withdrawn by the gateway, or timed out; a timeout
// posts "missed approval"; each end leaves an entry in the menu's recent
// decisions; a click on a notification after the fact says what became of
// its request.
func TestNotificationsFollowTheRequest(t *testing.T) {
	tests := []struct {
		name    string
		timeout time.Duration
		end     func(tr *Tray, auth *authz.Authority, id string)
		outcome string // in the menu line and the outcome window
		missed  bool
	}{
		{"approved in the window", time.Minute, func(tr *Tray, _ *authz.Authority, id string) {
			runFyne(func() { test.Tap(tr.Approval.approveOnce) })
		}, "approved once", false},
		{"denied in the window", time.Minute, func(tr *Tray, _ *authz.Authority, id string) {
			runFyne(func() { test.Tap(tr.Approval.deny) })
		}, "denied", false},
		{"approved from the command line", time.Minute, func(_ *Tray, auth *authz.Authority, id string) {
			if err := auth.Decide(ids.RequestID(id), authz.Decision{Choice: authz.ApproveRun, Tools: []string{"inventory_adjust"}, By: "cli"}); err != nil {
				panic(err)
			}
		}, "approved for this run", false},
		{"withdrawn", time.Minute, func(_ *Tray, auth *authz.Authority, id string) {
			if err := auth.Withdraw(ids.RequestID(id), "the agent run ended"); err != nil {
				panic(err)
			}
		}, "withdrawn", false},
		{"timed out", 300 * time.Millisecond, func(*Tray, *authz.Authority, string) {}, "not answered in time, so denied", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, auth, notes, refreshed := lifeTray(t, tt.timeout)
			id := auth.Raise(rebuildCard())
			until(t, refreshed, "the request is announced", func() bool { return len(notes.all()) > 0 })
			sent := notes.all()
			if sent[0].Key != string(id) {
				t.Fatalf("notifications sent: %+v, want the first under %s", sent, id)
			}
			if !strings.Contains(sent[0].Body, "wants to run `inventory_adjust` on inventory-local") {
				t.Errorf("the notification says %q, not the card's sentence", sent[0].Body)
			}
			tt.end(tr, auth, string(id))
			until(t, refreshed, "the notification is withdrawn", func() bool { return slices.Contains(notes.withdrawals(), string(id)) })
			var line string
			until(t, refreshed, "the menu lists the decision", func() bool {
				line = ""
				runFyne(func() {
					for _, it := range tr.Menu().Items {
						if strings.Contains(it.Label, menuLabel("`inventory_adjust` on inventory-local — ")) {
							line = it.Label
						}
					}
				})
				return line != ""
			})
			if !strings.HasSuffix(line, " — "+tt.outcome) {
				t.Errorf("menu line %q, want it to end in %q", line, tt.outcome)
			}
			missed := slices.ContainsFunc(notes.all(), func(n sentNotification) bool {
				return n.Key == missedKey(string(id)) && n.Title == "Portcullis: missed approval"
			})
			if missed != tt.missed {
				t.Errorf("missed-approval notification posted: %v, want %v (sent %+v)", missed, tt.missed, notes.all())
			}
			// The stale notification, clicked: what became of it.
			runFyne(sent[0].click)
			var text string
			runFyne(func() {
				if w := tr.Outcome(); w != nil {
					for _, o := range test.LaidOutObjects(w.Content()) {
						if l, ok := o.(*widget.Label); ok && strings.HasPrefix(l.Text, "The approval request") {
							text = l.Text
						}
					}
				}
			})
			if want := "The approval request for `inventory_adjust` on inventory-local was " + tt.outcome + " at "; !strings.HasPrefix(text, want) {
				t.Errorf("clicking the stale notification says %q, want it to start %q", text, want)
			}
			if tr.Approval.Visible() {
				t.Error("the stale click opened the approval window")
			}
			// Escape closes the outcome window.
			runFyne(func() { tr.Outcome().Canvas().OnTypedKey()(&fyne.KeyEvent{Name: fyne.KeyEscape}) })
			runFyne(func() {
				if tr.Outcome() != nil {
					t.Error("Escape does not close the outcome window")
				}
			})
		})
	}
}

// runFyne runs f as the UI does, inside fyne.Do, and waits for it.
func runFyne(f func()) { fyne.DoAndWait(f) }
