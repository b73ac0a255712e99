package ui

import (
	"context"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/gateway"
)

// labels returns the menu's item labels ("—" for a separator).
func labels(m *fyne.Menu) []string {
	var out []string
	for _, it := range m.Items {
		if it.IsSeparator {
			out = append(out, "—")
			continue
		}
		out = append(out, it.Label)
	}
	return out
}

func item(t *testing.T, m *fyne.Menu, prefix string) *fyne.MenuItem {
	t.Helper()
	for _, it := range m.Items {
		if strings.HasPrefix(it.Label, prefix) {
			return it
		}
	}
	t.Fatalf("no menu item %q in %q", prefix, labels(m))
	return nil
}

// runTray runs tr until the test ends; next returns the menu labels of the
// next refresh (failing after 10 s), refreshed delivers them all.
func runTray(t *testing.T, tr *Tray) (next func() []string, refreshed <-chan []string) {
	ch := make(chan []string, 16)
	tr.refreshed = func() { ch <- labels(tr.Menu()) }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { tr.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return func() []string {
		t.Helper()
		select {
		case m := <-ch:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("the menu was not rebuilt")
			return nil
		}
	}, ch
}

// TestTrayFollowsEvents runs the tray against a fake daemon and fake
// approvals: a daemon change signal rebuilds the menu (no polling: nothing
// changes without a signal), a raised request opens the window, sends a
// notification whose click shows that request, and turns the icon to the
// approval state; the menu's Restart and Quit entries reach the daemon.
func TestTrayFollowsEvents(t *testing.T) {
	a := test.NewTempApp(t)
	d := newFakeDaemon()
	f := newFakeApprovals()
	notes := &fakeNotifier{added: make(chan struct{}, 1)}
	quit := make(chan struct{}, 1)
	tr := NewTray(a, Options{Daemon: d, Approvals: f, Notifier: notes, Quit: func() { quit <- struct{}{} },
		Clock: func() time.Time { return testNow }})
	if got := labels(tr.Menu()); got[0] != "No servers configured" {
		t.Fatalf("initial menu %q", got)
	}
	next, refreshed := runTray(t, tr)
	next() // Run's first refresh

	d.set(daemon.StatusReport{Runs: []gateway.Status{run("r1", "inventory", gateway.StateReady, epochA, 12)}})
	want := []string{"inventory — ready · epoch S2AAAAAA · catalog r12", "—", "No approvals waiting", "Restart inventory",
		"—", "Preferences…", "Audit log…", "Launch at login", "—", "Quit Portcullis"}
	if d := cmp.Diff(want, next()); d != "" {
		t.Fatalf("menu after a change (-want +got):\n%s", d)
	}
	select {
	case m := <-refreshed:
		t.Fatalf("menu rebuilt without an event: %q", m)
	case <-time.After(1500 * time.Millisecond): // the countdown ticks once meanwhile
	}

	req := request("apr_1", 0, rebuildCard())
	req.Card.AgentRun = "r1"
	f.mu.Lock()
	f.pending = append(f.pending, req)
	f.mu.Unlock()
	f.ch <- authz.Event{Kind: authz.EventRaised, Request: req}
	got := next()
	if got[0] != "inventory — waiting for approval · epoch S2AAAAAA · catalog r12" || got[2] != "Approvals (1)…" {
		t.Errorf("menu with a request waiting: %q", got)
	}
	if tr.State() != TrayApproval || !tr.Approval.Visible() {
		t.Errorf("state %v, window visible %v; want approval, true", tr.State(), tr.Approval.Visible())
	}
	sent := notes.all()
	if len(sent) != 1 || sent[0].Title != "Portcullis: approval needed" || sent[0].click == nil {
		t.Fatalf("notifications %+v", sent)
	}
	tr.Approval.hide()
	sent[0].click() // fyne.Do runs inline in the test driver
	if !tr.Approval.Visible() {
		t.Error("clicking the notification did not show the window")
	}

	item(t, tr.Menu(), "Restart inventory").Action()
	if d.restarts[0] != "inventory" {
		t.Errorf("restarts %q", d.restarts)
	}
	// An agent is connected: Quit asks first, saying how many runs end;
	// Escape keeps running; "Quit and end them" quits.
	item(t, tr.Menu(), "Quit").Action()
	qw := tr.QuitConfirmation()
	if qw == nil {
		t.Fatal("Quit with an agent connected asked nothing")
	}
	var said string
	for _, o := range test.LaidOutObjects(qw.Content()) {
		if l, ok := o.(*widget.Label); ok {
			said = l.Text
		}
	}
	if !strings.HasPrefix(said, "1 agent run is connected. Quitting ends it") {
		t.Errorf("the quit confirmation says %q", said)
	}
	qw.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: fyne.KeyEscape})
	select {
	case <-quit:
		t.Fatal("Escape over the quit confirmation quit")
	default:
	}
	if tr.QuitConfirmation() != nil {
		t.Error("Escape did not close the quit confirmation")
	}
	item(t, tr.Menu(), "Quit").Action()
	tapButton(t, tr.QuitConfirmation().Canvas(), quitEndText)
	select {
	case <-quit:
	default:
		t.Error("Quit and end them did not call Options.Quit")
	}
	d.mu.Lock()
	d.rep.Runs = nil
	d.mu.Unlock()
	item(t, tr.Menu(), "Quit").Action() // nobody connected: at once
	select {
	case <-quit:
	default:
		t.Error("Quit with no agent connected did not quit at once")
	}
	if !item(t, tr.Menu(), "Quit").IsQuit {
		t.Error("the Quit item is not marked IsQuit: Fyne would add a second one")
	}
}

// TestTrayAuditFailure: an audit log that cannot be written turns the icon
// to failed, says so at the top of the menu, and sends one notification per
// failure (not one per status change while it lasts); once the log works
// again, a new failure is announced again.
func TestTrayAuditFailure(t *testing.T) {
	a := test.NewTempApp(t)
	d := newFakeDaemon()
	notes := &fakeNotifier{added: make(chan struct{}, 4)}
	tr := NewTray(a, Options{Daemon: d, Approvals: newFakeApprovals(), Notifier: notes, Clock: func() time.Time { return testNow }})
	next, _ := runTray(t, tr)
	next()
	ready := []gateway.Status{run("r1", "inventory", gateway.StateReady, epochA, 3)}
	failing := daemon.StatusReport{Runs: ready, Audit: daemon.AuditStatus{Error: "audit log unavailable: writing 000001.jsonl: no space left on device"}}
	d.set(failing)
	if got := next(); got[0] != "Audit log cannot be written: tool calls are refused" {
		t.Errorf("menu while the audit log fails: %q", got)
	}
	if tr.State() != TrayFailed {
		t.Errorf("state %v while the audit log fails, want failed", tr.State())
	}
	d.set(failing) // another change while it still fails
	next()
	sent := notes.all()
	if len(sent) != 1 || !strings.Contains(sent[0].Title, "audit log cannot be written") || !strings.Contains(sent[0].Body, "no space left on device") {
		t.Fatalf("notifications %+v, want one about the audit log", sent)
	}
	d.set(daemon.StatusReport{Runs: ready})
	if got := next(); got[0] != "inventory — ready · epoch S2AAAAAA · catalog r3" || tr.State() != TrayReady {
		t.Errorf("after recovery: state %v, menu %q", tr.State(), got)
	}
	d.set(failing)
	next()
	if n := len(notes.all()); n != 2 {
		t.Errorf("%d notifications after a second failure, want 2", n)
	}
}
