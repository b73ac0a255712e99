// Package ui is the menu-bar app's user interface, built with Fyne: the
// tray icon and menu, the approval window, notifications, Preferences and
// the audit viewer.
//
// Every widget is touched only inside fyne.Do (docs/DESIGN.md, "Conventions"). The UI
// subscribes to core events — the daemon's Changes and the approval
// authority's Subscribe — and never polls or blocks a gateway goroutine.
// Menu and card text come from pure functions (menuModel, runLine,
// cardModel, …) that table tests cover.
package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/loginitem"
	"github.com/portcullis/portcullis/core/textsafe"
)

// Daemon is what the tray needs from the daemon (*daemon.Daemon).
type Daemon interface {
	// Status is a snapshot of every configured server and agent run.
	Status() daemon.StatusReport
	// Changes signals (coalesced) after any agent run's visible state
	// changes; cancel ends the subscription.
	Changes() (ch <-chan struct{}, cancel func())
	// Restart replaces the process of every live agent run of label with a
	// new epoch and returns how many it restarted.
	Restart(label, why string) int
}

// Approvals is what the approval window needs from the approval broker
// (*authz.Authority).
type Approvals interface {
	// Subscribe delivers request events until cancel is called.
	Subscribe() (ch <-chan authz.Event, cancel func())
	// Pending returns the pending requests, oldest first.
	Pending() []authz.Request
	// Decide answers a pending request; authz.ErrNoRequest when it is no
	// longer pending.
	Decide(id ids.RequestID, d authz.Decision) error
	// DecideInput is Decide for an approval made in the window, with
	// what the window knew of the press behind it: the daemon refuses
	// synthetic input (daemon.ErrSyntheticInput, the request stays
	// pending) and has the OS authenticate the person when the origin is
	// unknown (daemon.WindowApprovals.DecideInput).
	DecideInput(id ids.RequestID, d authz.Decision, in daemon.WindowInput) error
}

// InputCheck tells where the press behind a window decision came from
// (platform.InputCheck).
type InputCheck interface {
	// Judge: window is the display server's handle of the window whose
	// button was activated, 0 when unknown; by how it was activated
	// ("button", "key"; "" when unknown).
	Judge(window uint64, by string) daemon.WindowInput
}

var (
	_ Daemon     = (*daemon.Daemon)(nil)
	_ CodeSource = (*daemon.Daemon)(nil)
	_ Approvals  = (*daemon.WindowApprovals)(nil)
)

// Options configure a Tray. Daemon, Approvals and Quit are required.
type Options struct {
	Daemon    Daemon
	Approvals Approvals
	// Notifier announces approval requests; nil: Fyne's notification,
	// which cannot be clicked.
	Notifier Notifier
	// LoginItem is the launch-at-login setting; nil: the menu entry is
	// disabled.
	LoginItem loginitem.Item
	// Preferences returns what the Preferences window needs; it is called
	// each time the window opens (from the menu), so that it reads fresh
	// state. Nil: the menu entry is disabled.
	Preferences func() PrefsDeps
	// Audit returns what the audit viewer needs, called each time it opens.
	// Nil: the menu entry is disabled.
	Audit func() AuditDeps
	// SetupKeys sets up the audit log's sealing keys on first start (the
	// log holds none) and returns the verification key, which the tray
	// shows once, with its QR code, in the verification key window. It
	// returns "" and no error when the log is sealed already, and an error
	// wrapping ErrKeysNotYet when the log is not open yet (the tray tries
	// again a second later). Nil: no keys are set up by the app.
	SetupKeys func() (key string, err error)
	// Input tells whether an approve button was pressed with a device of
	// the person's or by synthetic input; nil: the window cannot tell
	// (every approval then needs the OS authentication).
	Input InputCheck
	// InputNote is what the approval cards say about the window's input
	// check ("" when it can tell the person's presses; else why not and
	// what approving asks for); nil: nothing.
	InputNote func() string
	// Quit stops the daemon (cancels its context): the daemon ends every
	// agent run, so connected agents' shims get EOF; the caller quits Fyne
	// once the daemon returned.
	Quit func()
	// Clock is the approval window's clock for its countdown (default
	// time.Now).
	Clock  func() time.Time
	Logger *slog.Logger
	// WindowsOnly leaves the system tray to another process (the app's
	// MenuBar): this Tray shows windows only (the window process).
	WindowsOnly bool
}

// Tray is the menu-bar icon and menu, the approval window and the
// notifications of one Fyne app. Create it with NewTray (before the app
// runs), then call Run on a goroutine of its own.
type Tray struct {
	app  fyne.App
	opts Options
	log  *slog.Logger
	desk desktop.App // nil when the driver has no system tray (tests)

	// Approval is the approval window.
	Approval *ApprovalWindow

	// Touched only on the Fyne goroutine (inside fyne.Do):
	entries []menuEntry // the menu model last shown
	menu    *fyne.Menu  // the menu last built
	state   TrayState   // the icon last shown
	iconSet bool        // an icon was given to the desktop tray

	recent  []decided   // the requests resolved lately, newest first (at most maxRecent)
	quit    fyne.Window // the quit confirmation, nil when closed
	outcome fyne.Window // the window saying what became of a request, nil when closed

	refreshed func() // test hook: after each refresh, on the Fyne goroutine

	auditErr string // Run's goroutine only: the audit error last seen
	keysDone bool   // Run's goroutine only: the sealing keys need no setting up (any more)
	keys     *KeyWindow
}

// NewTray builds the tray of app. On a desktop driver it sets an initial
// menu and icon at once, as Fyne requires the system tray to be set up
// before the app runs.
func NewTray(app fyne.App, o Options) *Tray {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Notifier == nil {
		o.Notifier = FyneNotifier{App: app}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	t := &Tray{app: app, opts: o, log: log}
	t.Approval = newApprovalWindow(app, o.Approvals, o.Clock, log)
	t.Approval.guard = approvalGuard
	if cs, ok := o.Daemon.(CodeSource); ok {
		t.Approval.code = cs
	}
	t.Approval.input, t.Approval.inputNote = o.Input, o.InputNote
	if d, ok := app.(desktop.App); ok && !o.WindowsOnly {
		t.desk = d
	}
	t.show(o.Daemon.Status(), o.Approvals.Pending(), t.login())
	return t
}

// approvalGuard is how long a card must have been on screen before its
// approve buttons take a click (see ApprovalWindow.guard): longer than a
// double click, shorter than reading a card.
const approvalGuard = 500 * time.Millisecond

// Run keeps the menu, the icon and the approval window up to date from core
// events until ctx ends: a daemon change rebuilds the menu; an approval
// request raised opens the approval window and sends a notification; one
// resolved leaves the window. While requests wait, the countdown is redrawn
// every second. Run also makes the app an accessory app on macOS (no Dock
// icon).
func (t *Tray) Run(ctx context.Context) {
	changes, stopChanges := t.opts.Daemon.Changes()
	defer stopChanges()
	events, stopEvents := t.opts.Approvals.Subscribe()
	defer stopEvents()
	fyne.Do(setAccessoryPolicy)

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	refresh := func(raised []authz.Request) {
		rep, pending, login := t.opts.Daemon.Status(), t.opts.Approvals.Pending(), t.login()
		for _, r := range raised {
			t.notify(r)
		}
		if rep.Audit.Error != "" && t.auditErr == "" {
			t.notifyAudit(rep.Audit.Error)
		}
		t.setupKeys(rep)
		t.auditErr = rep.Audit.Error
		fyne.Do(func() {
			t.Approval.sync(pending)
			t.show(rep, pending, login)
			if t.refreshed != nil {
				t.refreshed()
			}
		})
	}
	refresh(nil) // requests raised before Run subscribed
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-changes:
			if !ok {
				return
			}
			refresh(nil)
		case ev, ok := <-events:
			if !ok {
				return
			}
			var raised []authz.Request
			switch ev.Kind {
			case authz.EventRaised:
				raised = append(raised, ev.Request)
			case authz.EventResolved:
				t.resolved(ev)
			}
			refresh(raised)
		case <-tick.C:
			if !t.keysDone {
				t.setupKeys(t.opts.Daemon.Status())
			}
			if !headless {
				// Under the headless driver fyne.Do runs here, on this
				// goroutine, concurrently with the test driving the
				// window: the countdown is only redrawn with a real
				// driver (countdownText has its own tests).
				fyne.Do(t.Approval.tick)
			}
		}
	}
}

// ErrKeysNotYet is wrapped by the error of Options.SetupKeys when the audit
// log is not open yet.
var ErrKeysNotYet = errors.New("the audit log is not open yet")

// setupKeys sets up the audit log's sealing keys on first start and shows
// the verification key (Run's goroutine).
func (t *Tray) setupKeys(rep daemon.StatusReport) {
	st := rep.Audit
	if t.keysDone || t.opts.SetupKeys == nil {
		return
	}
	if st.Sealed {
		t.keysDone = true
		return
	}
	if st.Error != "" {
		return // the log cannot be written: try when it can
	}
	key, err := t.opts.SetupKeys()
	switch {
	case errors.Is(err, ErrKeysNotYet):
		return
	case err != nil:
		t.keysDone = true
		t.log.Warn("setting up the audit log's sealing keys", "err", err)
		return
	}
	t.keysDone = true
	if key == "" {
		return
	}
	fyne.Do(func() {
		k, err := showKeyWindow(t.app, key, rep.Authentication)
		if err != nil {
			t.log.Error("showing the verification key", "err", err)
			return
		}
		t.keys = k
	})
}

// Keys returns the verification key window, nil before it was shown.
// Fyne goroutine only.
func (t *Tray) Keys() *KeyWindow { return t.keys }

// maxRecent is how many resolved requests the menu lists.
const maxRecent = 5

// resolved withdraws the notification of a request decided, withdrawn or
// timed out, remembers what became of it for the menu, and announces a
// missed one (Run's goroutine).
func (t *Tray) resolved(ev authz.Event) {
	d := decidedOf(ev, t.opts.Clock())
	if err := t.opts.Notifier.Withdraw(d.ID); err != nil {
		t.log.Warn("approval notification not withdrawn", "request", d.ID, "err", err)
	}
	if d.Missed {
		title, body := missedText(d)
		if err := t.post(missedKey(d.ID), title, body, func() {
			fyne.Do(func() { t.showOutcome(d) })
		}); err != nil {
			t.log.Warn("missed-approval notification not shown", "request", d.ID, "err", err)
		}
	}
	fyne.Do(func() {
		t.recent = slices.Insert(t.recent, 0, d)
		if len(t.recent) > maxRecent {
			t.recent = t.recent[:maxRecent]
		}
	})
}

// post shows a notification through the Notifier. What servers wrote in
// its title and body (a tool's name, a reason) was escaped where the text
// was composed (textsafe.Line); Controls is the net over the whole: data,
// never control of the notification daemon or the screen.
func (t *Tray) post(key, title, body string, onClick func()) error {
	return t.opts.Notifier.Notify(key, textsafe.Controls(strings.ReplaceAll(title, "\n", " ")), textsafe.Controls(body), onClick)
}

// notify announces a raised request; clicking the notification brings the
// approval window forward on that request, or says what became of it.
func (t *Tray) notify(r authz.Request) {
	title, body := notificationText(r)
	id := r.ID
	err := t.post(string(id), title, body, func() {
		fyne.Do(func() { t.openRequest(string(id)) })
	})
	if err != nil {
		t.log.Warn("approval notification not shown", "request", id, "err", err)
	}
}

// notifyAudit tells the person, once per failure, that the audit log cannot
// be written and tool calls are refused meanwhile; clicking opens the audit
// viewer.
func (t *Tray) notifyAudit(why string) {
	err := t.post("audit", "Portcullis: audit log cannot be written",
		"Every tool call is refused until it can: "+why, func() {
			if t.opts.Audit != nil {
				fyne.Do(func() { ShowAuditViewer(t.app, t.opts.Audit()) })
			}
		})
	if err != nil {
		t.log.Warn("audit failure notification not shown", "err", err)
	}
}

// openRequest shows request id in the approval window while it is
// pending, else what became of it (Fyne goroutine).
func (t *Tray) openRequest(id string) {
	if slices.ContainsFunc(t.opts.Approvals.Pending(), func(r authz.Request) bool { return string(r.ID) == id }) {
		t.Approval.ShowRequest(id)
		return
	}
	for _, d := range t.recent {
		if d.ID == id {
			t.showOutcome(d)
			return
		}
	}
	t.showOutcome(decided{ID: id})
}

// showOutcome opens a small window saying what became of request d (Fyne
// goroutine). Escape, Ctrl/Cmd+W and its button close it.
func (t *Tray) showOutcome(d decided) {
	text := d.outcomeText()
	if d.Outcome == "" {
		text = "This approval request is no longer pending, and Portcullis no longer remembers how it ended " +
			"(the menu keeps the last few). The audit log has it: Audit log… in the menu."
	}
	if t.outcome != nil {
		t.outcome.Close()
	}
	w := t.app.NewWindow("Portcullis — approval request")
	w.SetIcon(appIcon)
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	closeBtn := widget.NewButton("Close", w.Close)
	w.SetContent(container.NewBorder(nil, container.NewHBox(layout.NewSpacer(), closeBtn), nil, nil, l))
	w.Resize(fyne.NewSize(420, 0))
	closeOnKeys(w, nil, nil)
	w.SetOnClosed(func() {
		if t.outcome == w {
			t.outcome = nil
		}
	})
	t.outcome = w
	activateApp()
	w.Show()
}

// Outcome returns the window saying what became of a request, nil when
// none is open. Fyne goroutine only.
func (t *Tray) Outcome() fyne.Window { return t.outcome }

// Buttons of the quit confirmation.
const (
	quitKeepText = "Keep running"
	quitEndText  = "Quit and end them"
)

// quitText says what quitting does to n connected agent runs.
func quitText(n int) string {
	if n == 1 {
		return "1 agent run is connected. Quitting ends it: its server stops, and the agent's calls fail " +
			"(server_unavailable) until Portcullis runs again and the agent reconnects."
	}
	return fmt.Sprintf("%d agent runs are connected. Quitting ends all %d: their servers stop, and the agents' calls fail "+
		"(server_unavailable) until Portcullis runs again and the agents reconnect.", n, n)
}

// confirmQuit quits at once when no agent is connected, else asks first,
// saying how many runs will end (Fyne goroutine). Escape, Ctrl/Cmd+W and
// "Keep running" keep Portcullis running.
func (t *Tray) confirmQuit() {
	n := len(t.opts.Daemon.Status().Runs)
	if n == 0 {
		t.opts.Quit()
		return
	}
	if t.quit != nil {
		t.quit.Close()
	}
	w := t.app.NewWindow("Quit Portcullis?")
	w.SetIcon(appIcon)
	l := widget.NewLabel(quitText(n))
	l.Wrapping = fyne.TextWrapWord
	keep := widget.NewButtonWithIcon(quitKeepText, theme.ConfirmIcon(), w.Close)
	end := widget.NewButtonWithIcon(quitEndText, theme.LogoutIcon(), func() {
		w.Close()
		t.opts.Quit()
	})
	end.Importance = widget.DangerImportance
	w.SetContent(container.NewBorder(nil, container.NewHBox(layout.NewSpacer(), keep, end), nil, nil, l))
	w.Resize(fyne.NewSize(440, 0))
	closeOnKeys(w, nil, nil)
	w.SetOnClosed(func() {
		if t.quit == w {
			t.quit = nil
		}
	})
	t.quit = w
	activateApp()
	w.Show()
	w.CenterOnScreen()
}

// QuitConfirmation returns the quit confirmation window, nil when none is
// open. Fyne goroutine only.
func (t *Tray) QuitConfirmation() fyne.Window { return t.quit }

// login reads the launch-at-login state.
func (t *Tray) login() loginState {
	if t.opts.LoginItem == nil {
		return loginState{}
	}
	on, err := t.opts.LoginItem.Enabled()
	if err != nil {
		t.log.Warn("reading the launch-at-login setting", "err", err)
		return loginState{}
	}
	return loginState{Available: true, Enabled: on}
}

// show rebuilds the menu and sets the icon (Fyne goroutine).
func (t *Tray) show(rep daemon.StatusReport, pending []authz.Request, login loginState) {
	t.entries = menuModel(rep, pending, login, t.recent)
	t.menu = fyne.NewMenu("Portcullis", t.buildMenu(t.entries)...)
	state := trayStateOf(rep, len(pending))
	if t.desk == nil {
		t.state = state
		return
	}
	t.desk.SetSystemTrayMenu(t.menu)
	if state != t.state || !t.iconSet {
		t.desk.SetSystemTrayIcon(trayResources[state])
		t.iconSet = true
	}
	t.state = state
}

// Menu returns the menu last built. Fyne goroutine only (tests: the
// test driver runs fyne.Do inline).
func (t *Tray) Menu() *fyne.Menu { return t.menu }

// State returns the icon state last shown. Fyne goroutine only.
func (t *Tray) State() TrayState { return t.state }

// buildMenu turns menu entries into Fyne menu items with their actions.
func (t *Tray) buildMenu(entries []menuEntry) []*fyne.MenuItem {
	items := make([]*fyne.MenuItem, 0, len(entries))
	for _, e := range entries {
		if e.Kind == entrySeparator {
			items = append(items, fyne.NewMenuItemSeparator())
			continue
		}
		it := fyne.NewMenuItem(menuLabel(e.Label), t.action(e))
		it.Disabled, it.Checked = e.Disabled || it.Action == nil && e.Kind != entryInfo, e.Checked
		it.IsQuit = e.Kind == entryQuit
		if e.Icon {
			it.Icon = checkOffIcon
		}
		items = append(items, it)
	}
	return items
}

// action is what clicking a menu entry does (run on the Fyne goroutine).
func (t *Tray) action(e menuEntry) func() {
	switch e.Kind {
	case entryApprovals:
		return t.Approval.Show
	case entryRestart:
		label := e.Server
		return func() {
			// Restart starts its work on goroutines of its own; it only
			// reads the daemon's tables here.
			n := t.opts.Daemon.Restart(label, "restart requested from the menu bar")
			t.log.Info("restart requested from the menu bar", "server", label, "runs", n)
		}
	case entryPrefs:
		if t.opts.Preferences == nil {
			return nil
		}
		return func() { ShowPreferences(t.app, t.opts.Preferences()) }
	case entryAudit:
		if t.opts.Audit == nil {
			return nil
		}
		return func() { ShowAuditViewer(t.app, t.opts.Audit()) }
	case entryLogin:
		want := !e.Checked
		return func() { t.setLogin(want) }
	case entryServer:
		if t.opts.Preferences == nil {
			return nil
		}
		label := e.Server
		return func() { ShowPreferencesAt(t.app, t.opts.Preferences(), label) }
	case entryRecent:
		for _, d := range t.recent {
			if d.ID == e.Request {
				return func() { t.showOutcome(d) }
			}
		}
		return nil
	case entryQuit:
		return t.confirmQuit
	}
	return nil
}

// setLogin turns launch at login on or off and redraws the menu.
func (t *Tray) setLogin(on bool) {
	item := t.opts.LoginItem
	if item == nil {
		return
	}
	go func() {
		var err error
		if on {
			err = item.Enable()
		} else {
			err = item.Disable()
		}
		if err != nil {
			t.log.Warn("changing the launch-at-login setting", "enable", on, "err", err)
		}
		rep, pending, login := t.opts.Daemon.Status(), t.opts.Approvals.Pending(), t.login()
		fyne.Do(func() { t.show(rep, pending, login) })
	}()
}
