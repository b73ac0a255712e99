package ui

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/daemon"
	"github.com/portcullis/portcullis/core/ids"
	"github.com/portcullis/portcullis/core/textsafe"
)

// Texts of the approval window's buttons, as the design names the choices.
const (
	approveRunText  = "Approve for this run"
	approveOnceText = "Approve once"
	denyText        = "Deny"
	// allowNewCodeText replaces approveRunText on the card of a call
	// refused as authorization_stale: what can help is to allow the new
	// code for the run; that call is not approved once (it was refused).
	allowNewCodeText = "Allow the new code for this run"
)

// approvalTitle is the approval window's title.
const approvalTitle = "Portcullis — Approval needed"

// ApprovalWindow shows the pending approval requests, one card at a time
// ("1 of 3"), and sends the person's decision to the authority with By
// "app". It pops up when a request arrives. No button is the default: Enter
// decides nothing. Escape denies the request shown; closing the window
// denies every request it holds. A request decided elsewhere (the command
// line) or timed out leaves the window when the authority says so.
//
// All methods run on the Fyne goroutine (inside fyne.Do).
type ApprovalWindow struct {
	app   fyne.App
	auth  Approvals
	clock func() time.Time
	log   *slog.Logger

	win     fyne.Window                          // created on first use
	queue   []authz.Request                      // oldest first
	cur     int                                  // index of the request shown
	picked  map[ids.RequestID]map[string]bool    // request → tool → ticked, where the person changed the proposal
	skipped map[ids.RequestID]map[ids.RunID]bool // request → agent run the person unticked on a card of several runs
	popped  map[ids.RequestID]bool               // pending requests the window popped up for
	visible bool

	// guard is how long after a card appears (the window popped up, or the
	// next request of the queue replaced the one decided) its approve
	// buttons ignore clicks: a click aimed at what was there before, or a
	// double click, must not approve a request the person has not seen.
	// Deny is never held back. shownID and shownAt say which card appeared
	// when (wall clock, not the countdown's clock).
	guard time.Duration
	// by is how the approve button being handled was activated
	// ("button", "key"; "" when a test called decide directly).
	by      string
	shownID string
	shownAt time.Time

	// input judges the press behind an approval (nil: unknown);
	// inputNote says on every card what the window can tell of presses.
	// notice is the answer to the last approval of the card shown that
	// did not take effect (synthetic input, no OS authentication), for
	// request noticeFor.
	input     InputCheck
	inputNote func() string
	notice    *widget.Label
	noticeFor string
	noteLabel *widget.Label

	heading     *widget.Label // the card's sentence
	queueLabel  *widget.Label
	prev, next  *escButton
	body        *fyne.Container // arguments, what changed, details: scrolls
	scroll      *container.Scroll
	countdown   *widget.Label
	footer      *fyne.Container // the countdown and the buttons (layoutFooter)
	scope       *widget.Label   // what the run approval grants now, above the tool ticks
	ticks       *fyne.Container
	ticksScroll *container.Scroll // the tool ticks, scrolled when there are many
	creds       *widget.Label     // the credential scope
	runs        *fyne.Container   // the runs of a card of several runs, each ticked unless left out
	scopeBox    *fyne.Container   // runs, scope, ticks, credentials: always in view, above the buttons
	bottom      *fyne.Container
	approveRun  *escButton
	approveOnce *escButton
	approveCode *escButton // "this code, for every run of AGENT"
	deny        *escButton

	// code, when set, tells what changed in the server's source tree
	// (approvalcode.go); codeReports holds its answer per request (nil:
	// asked, not answered yet).
	code        CodeSource
	codeReports codeCache
	// codeAsync runs the fetch of a code report off the Fyne goroutine
	// (nil: a goroutine of its own). Tests queue it, to run it once the
	// render that asked is over, as a desktop driver's fyne.Do would.
	codeAsync func(func())

	detailsOpen bool       // the Details of the card shown are unfolded
	details     *escButton // folds and unfolds them

	top        *fyne.Container // heading, queue position and arrows
	closingMsg *widget.Label   // the question of the closing confirmation
	closing    dialog.Dialog   // the confirmation shown when closing would deny several requests
	unrecorded dialog.Dialog   // the notice shown when an approval could not be recorded
	diff       dialog.Dialog   // the code diff shown over the card (approvalcode.go)
}

func newApprovalWindow(app fyne.App, auth Approvals, clock func() time.Time, log *slog.Logger) *ApprovalWindow {
	return &ApprovalWindow{app: app, auth: auth, clock: clock, log: log, picked: map[ids.RequestID]map[string]bool{}, skipped: map[ids.RequestID]map[ids.RunID]bool{}, popped: map[ids.RequestID]bool{}}
}

// ensure creates the window and its widgets on first use.
func (w *ApprovalWindow) ensure() {
	if w.win != nil {
		return
	}
	w.win = w.app.NewWindow(approvalTitle)
	w.win.SetIcon(appIcon)
	w.heading = widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	w.heading.SizeName = theme.SizeNameSubHeadingText
	w.heading.Wrapping = fyne.TextWrapWord
	w.queueLabel = widget.NewLabel("")
	w.prev = w.button("", theme.NavigateBackIcon(), func() { w.move(-1) })
	w.next = w.button("", theme.NavigateNextIcon(), func() { w.move(+1) })
	w.prev.Importance, w.next.Importance = widget.LowImportance, widget.LowImportance
	w.body = container.NewVBox()
	w.scroll = container.NewVScroll(w.body)
	w.countdown = widget.NewLabel("")
	w.countdown.Truncation = fyne.TextTruncateEllipsis
	w.scope = widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	w.scope.Wrapping = fyne.TextWrapWord
	w.ticks = container.NewGridWithColumns(2)
	w.ticksScroll = container.NewVScroll(w.ticks)
	w.creds = widget.NewLabel("")
	w.creds.Wrapping = fyne.TextWrapWord
	w.runs = container.NewVBox()
	w.runs.Hide()
	w.notice = widget.NewLabel("")
	w.notice.Wrapping = fyne.TextWrapWord
	w.notice.Importance = widget.DangerImportance
	w.notice.Hide()
	w.noteLabel = widget.NewLabel("")
	w.noteLabel.Wrapping = fyne.TextWrapWord
	w.noteLabel.Importance = widget.WarningImportance
	w.noteLabel.Hide()
	w.scopeBox = container.NewVBox(w.runs, w.scope, w.ticksScroll, w.creds, w.noteLabel, w.notice)
	w.details = w.button("", nil, w.toggleDetails)
	w.details.Importance = widget.LowImportance
	w.details.Alignment = widget.ButtonAlignLeading
	// The narrowest choice first; none is the default (Enter decides
	// nothing, no button is highlighted).
	w.deny = w.button(denyText, theme.CancelIcon(), func() { w.decide(authz.Deny) })
	w.approveOnce = w.button(approveOnceText, theme.ConfirmIcon(), func() { w.decide(authz.ApproveOnce) })
	w.approveRun = w.button(approveRunText, theme.ConfirmIcon(), func() { w.decide(authz.ApproveRun) })
	w.approveCode = w.button("", theme.ConfirmIcon(), func() { w.decide(authz.ApproveCode) })
	w.approveCode.Hide()

	w.top = container.NewBorder(nil, nil, nil, container.NewHBox(w.queueLabel, w.prev, w.next), w.heading)
	w.footer = container.NewVBox()
	w.layoutFooter(cardWidth)
	// The sentence on top and the scope and buttons below stay in view at
	// every size: only the middle (arguments, changes, details) scrolls.
	w.bottom = container.NewVBox(widget.NewSeparator(), w.scopeBox, w.footer)
	w.win.SetContent(container.NewBorder(container.NewVBox(w.top, widget.NewSeparator()), w.bottom, nil, nil, w.scroll))
	w.win.Resize(fyne.NewSize(cardWidth, 480))
	w.win.CenterOnScreen()
	w.win.SetCloseIntercept(w.closeRequested)
	w.win.Canvas().SetOnTypedKey(func(ev *fyne.KeyEvent) {
		if ev.Name == fyne.KeyEscape {
			w.escape()
		}
	})
	// Ctrl/Cmd+W closes the window only when no card is open: on a card,
	// closing would deny, which Escape (one request) or the close button
	// (all, asking first) do deliberately.
	w.win.Canvas().AddShortcut(closeShortcut, func(fyne.Shortcut) {
		if len(w.queue) == 0 {
			w.hide()
		}
	})
}

// sync makes the queue the pending requests (oldest first), keeping the
// request shown when it is still pending. A request the window has not
// popped up for yet brings it to the front, whichever event told of it
// first (the daemon's status change and the authority's "raised" event
// race), and whether it was raised before the tray subscribed. An empty
// queue hides the window.
func (w *ApprovalWindow) sync(pending []authz.Request) {
	shown := w.currentID()
	added := false
	for _, r := range pending {
		if !w.popped[r.ID] {
			w.popped[r.ID] = true
			added = true
		}
	}
	for id := range w.popped {
		if !slices.ContainsFunc(pending, func(r authz.Request) bool { return r.ID == id }) {
			delete(w.popped, id)
		}
	}
	w.queue = slices.Clone(pending)
	w.cur = 0
	for i, r := range w.queue {
		if r.ID == shown {
			w.cur = i
		}
	}
	for id := range w.picked {
		if !slices.ContainsFunc(w.queue, func(r authz.Request) bool { return r.ID == id }) {
			delete(w.picked, id)
		}
	}
	w.codeReports.keep(func(id ids.RequestID) bool {
		return slices.ContainsFunc(w.queue, func(r authz.Request) bool { return r.ID == id })
	})
	switch {
	case len(w.queue) == 0:
		w.hide()
	case added:
		w.Show()
	case w.visible:
		w.render()
	}
}

// Show brings the window to the front with the request shown (or the
// oldest). On macOS the accessory app activates itself first.
func (w *ApprovalWindow) Show() {
	w.ensure()
	if !w.visible {
		w.shownID = "" // popping up: the card appears now
	}
	popping := !w.visible
	began := time.Now()
	w.render()
	rendered := time.Now()
	activateApp()
	w.win.Show()
	if popping {
		// Where a window's first showing goes (PORTCULLIS_DEBUG): the
		// card's layout, then the window made, mapped and drawn.
		w.log.Debug("approval window shown", "render_ms", rendered.Sub(began).Milliseconds(), "show_ms", time.Since(rendered).Milliseconds())
	}
	if popping {
		// Shown again, a window goes back where it was, sized for the
		// card it showed then: centred, the card that pops up is on the
		// screen however much taller it is (fit).
		w.win.CenterOnScreen()
	}
	w.win.RequestFocus()
	w.win.Canvas().Unfocus() // no control takes Enter
	w.visible = true
}

// ShowRequest shows request id (a notification was clicked) if it is still
// pending, else the oldest one.
func (w *ApprovalWindow) ShowRequest(id string) {
	for i, r := range w.queue {
		if string(r.ID) == id {
			w.cur = i
		}
	}
	w.Show()
}

// Visible reports whether the window is shown.
func (w *ApprovalWindow) Visible() bool { return w.visible }

// Queue returns the ids of the requests in the window, oldest first, and
// the index of the one shown.
func (w *ApprovalWindow) Queue() (ids []string, shown int) {
	for _, r := range w.queue {
		ids = append(ids, string(r.ID))
	}
	return ids, w.cur
}

// Window returns the Fyne window (nil before the first request).
func (w *ApprovalWindow) Window() fyne.Window { return w.win }

func (w *ApprovalWindow) hide() {
	if w.win != nil && w.visible {
		w.win.Hide()
	}
	w.visible = false
	w.syncClosing()
}

func (w *ApprovalWindow) currentID() ids.RequestID {
	if w.cur < len(w.queue) {
		return w.queue[w.cur].ID
	}
	return ""
}

// move shows the previous (-1) or next (+1) request of the queue.
func (w *ApprovalWindow) move(d int) {
	if n := w.cur + d; n >= 0 && n < len(w.queue) {
		w.cur = n
		w.render()
	}
}

// decide answers the request shown with choice and shows the next one.
func (w *ApprovalWindow) decide(choice authz.Choice) {
	if w.cur >= len(w.queue) {
		return
	}
	r := w.queue[w.cur]
	defer func() { w.by = "" }() // told afresh by the next activation
	if choice != authz.Deny && w.guard > 0 {
		if since := time.Since(w.shownAt); since < w.guard {
			w.log.Info("approval click ignored: the card appeared just before", "request", r.ID, "after", since.Round(time.Millisecond))
			return
		}
	}
	d := authz.Decision{Choice: choice, By: "app"}
	if choice == authz.ApproveRun || choice == authz.ApproveCode {
		d.Tools = w.ticked(r)
	}
	if len(r.Card.AlsoRuns) > 0 && choice != authz.Deny {
		// The runs ticked on the card shown; a run left out stays held.
		if d.Runs = w.runsTicked(r); len(d.Runs) == 0 {
			return
		}
	}
	var err error
	if choice == authz.Deny {
		err = w.auth.Decide(r.ID, d)
	} else {
		// The press that activated the button: a device's approves; a
		// synthetic one never does; where the window cannot tell, the
		// OS authenticates the person first.
		in := daemon.WindowInput{Origin: daemon.InputUnknown, Reason: "this window has no input check"}
		if w.input != nil {
			in = w.input.Judge(nativeHandle(w.win), w.by)
		}
		err = w.auth.DecideInput(r.ID, d, in)
		if err != nil && !errors.Is(err, authz.ErrUnrecorded) && w.pending(string(r.ID)) {
			// Nothing was decided: the card stays, and says why.
			w.log.Warn("approval not taken; the card stays", "request", r.ID, "input", in.Origin, "device", in.Device, "err", err)
			w.noticeFor = string(r.ID)
			w.notice.SetText(err.Error())
			w.notice.Show()
			w.fit()
			return
		}
	}
	// Found again: the authority's event for this decision may have
	// taken it off the queue already (Fyne's test driver runs that
	// event's update at once, during DecideInput).
	if i := slices.IndexFunc(w.queue, func(x authz.Request) bool { return x.ID == r.ID }); i >= 0 {
		w.queue = slices.Delete(w.queue, i, i+1)
	}
	delete(w.picked, r.ID)
	delete(w.skipped, r.ID)
	if w.cur >= len(w.queue) && w.cur > 0 {
		w.cur--
	}
	if err != nil {
		// Decided elsewhere or timed out meanwhile: the authority's event
		// says which; nothing to undo here.
		level := slog.LevelWarn
		if errors.Is(err, authz.ErrNoRequest) {
			level = slog.LevelInfo
		}
		w.log.Log(context.Background(), level, "approval decision not taken", "request", r.ID, "choice", choice, "err", err)
	}
	if len(w.queue) > 0 {
		w.render()
	}
	if errors.Is(err, authz.ErrUnrecorded) {
		// The person approved and nothing was granted: they must know.
		d := dialog.NewInformation("Not approved: the audit log cannot be written",
			"Portcullis grants nothing it cannot record, so the call was refused (audit_unavailable). "+
				"Check the disk and the data directory; the menu bar shows when the audit log works again.", w.win)
		d.SetOnClosed(func() {
			w.unrecorded = nil
			if len(w.queue) == 0 {
				w.hide()
			}
		})
		w.unrecorded = d
		d.Show()
		return
	}
	if len(w.queue) == 0 {
		w.hide()
	}
}

// pending reports whether request id is still waiting for a decision.
func (w *ApprovalWindow) pending(id string) bool {
	return slices.ContainsFunc(w.auth.Pending(), func(r authz.Request) bool { return string(r.ID) == id })
}

// closeRequested denies every request in the window and hides it: closing
// the window is a "no" to all of them.
//
// With one request, closing denies it, like Escape. With several, the person
// is asked first: closing would deny requests they may not have looked at.
func (w *ApprovalWindow) closeRequested() {
	if len(w.queue) <= 1 {
		w.closeAnswer(true)
		return
	}
	if w.closing != nil {
		return
	}
	w.closingMsg = widget.NewLabel(closingText(len(w.queue)))
	w.closingMsg.Wrapping = fyne.TextWrapWord
	d := askDialogWith("Deny every waiting request?", w.closingMsg, w.win,
		keepChoice(closeKeepText, func() { w.closeAnswer(false) }),
		destroyChoice(closeDenyText, nil, func() { w.closeAnswer(true) }))
	w.closing = d
	d.Show()
}

// closingText is the question of the closing confirmation for n requests.
func closingText(n int) string {
	return fmt.Sprintf("%d approval requests are waiting. Closing this window denies every one of them, also those you have not looked at.", n)
}

// syncClosing keeps the closing confirmation true to the queue: it counts
// the requests waiting now, and goes away when one or none is left (decided
// elsewhere, or timed out): it never outlives what it asked about.
func (w *ApprovalWindow) syncClosing() {
	if w.closing == nil {
		return
	}
	if len(w.queue) <= 1 || !w.visible {
		d := w.closing
		w.closing = nil
		d.Hide()
		return
	}
	w.closingMsg.SetText(closingText(len(w.queue)))
}

// Buttons of the confirmation closeRequested shows.
const (
	closeDenyText = "Deny all and close"
	closeKeepText = "Keep open"
)

// closeAnswer denies every request and hides the window (denyAll), or
// leaves everything as it is.
func (w *ApprovalWindow) closeAnswer(denyAll bool) {
	w.closing = nil
	if !denyAll {
		return
	}
	for len(w.queue) > 0 {
		w.cur = 0
		w.decide(authz.Deny)
	}
	w.hide()
}

// ticked is the tool scope ticked on r's card, in card order: what the
// card proposed, changed where the person ticked or unticked a tool; the
// called tool always.
func (w *ApprovalWindow) ticked(r authz.Request) []string {
	out := []string{}
	for _, t := range r.Card.Offered() {
		on, changed := w.picked[r.ID][t]
		if t == r.Card.Tool || (changed && on) || (!changed && slices.Contains(r.Card.ToolScope, t)) {
			out = append(out, t)
		}
	}
	return out
}

// runsTicked is the agent runs ticked on r's card, in card order.
func (w *ApprovalWindow) runsTicked(r authz.Request) []ids.RunID {
	out := []ids.RunID{}
	for _, run := range r.Card.RunNames() {
		if !w.skipped[r.ID][run] {
			out = append(out, run)
		}
	}
	return out
}

// renderRuns lists the runs of a card of several runs, each with a tick:
// the decision answers the ticked ones, a run left out stays held.
func (w *ApprovalWindow) renderRuns(r authz.Request) {
	w.runs.Objects = nil
	if len(r.Card.AlsoRuns) == 0 {
		w.runs.Hide()
		w.runs.Refresh()
		return
	}
	w.runs.Add(factLabel(runsHeading(r.Card)))
	id := r.ID
	for _, rc := range r.Card.Runs() {
		run := rc.AgentRun
		c := w.check(runLabel(rc))
		c.SetChecked(!w.skipped[id][run])
		c.OnChanged = func(on bool) {
			if w.skipped[id] == nil {
				w.skipped[id] = map[ids.RunID]bool{}
			}
			w.skipped[id][run] = !on
			w.updateApproveRun(r)
		}
		w.runs.Add(c)
	}
	w.runs.Show()
	w.runs.Refresh()
}

// runsHeading heads the runs of a card of several runs.
func runsHeading(c authz.Card) string {
	return fmt.Sprintf("One change, %d runs of %s (one grant each; untick a run to leave its call held):", len(c.Runs()), textsafe.Line(agentProgram(c)))
}

// runLabel is one run of a card of several runs: its pid, epoch and call.
func runLabel(rc authz.RunCall) string {
	s := fmt.Sprintf("run %s, pid %d, epoch %s", shortID(string(rc.AgentRun)), rc.AgentPID, shortID(string(rc.CurrentEpoch)))
	if rc.Tool != "" {
		args := strings.Join(strings.Fields(string(rc.Arguments)), " ")
		if args == "" {
			args = "{}"
		}
		if r := []rune(args); len(r) > maxRunArgs {
			args = string(r[:maxRunArgs]) + "…"
		}
		s += ": " + textsafe.Line(rc.Tool) + " " + textsafe.Line(args)
	}
	return s
}

// maxRunArgs bounds, in runes, the arguments of a run's call on its line.
const maxRunArgs = 80

// shortID is the last 8 characters of an id, enough to tell runs apart.
func shortID(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-8:]
	}
	return id
}

// agentProgram is the name of the card's agent program (its executable's
// base name, as the kernel reports it).
func agentProgram(c authz.Card) string {
	if c.AgentExe == "" {
		return "the agent"
	}
	return filepath.Base(c.AgentExe)
}

// codeChoice reports whether card c offers "this code, for every run of
// AGENT": a call's card with its code measured, not a launch, a server
// request, a credential asked on every use or a call refused already.
func codeChoice(c authz.Card) bool {
	return c.Code != "" && c.Identity == "" && c.ServerRequest == nil && !c.AskEveryUse && !c.Stale && c.AgentExe != ""
}

// tick redraws the countdown.
func (w *ApprovalWindow) tick() {
	if w.win == nil || w.cur >= len(w.queue) {
		return
	}
	w.countdown.SetText(countdownText(w.clock(), w.queue[w.cur].Deadline))
}

// render shows the current request's card.
func (w *ApprovalWindow) render() {
	w.ensure()
	defer w.syncClosing()
	if w.cur >= len(w.queue) {
		w.heading.SetText("No approval requests are waiting")
		w.queueLabel.SetText("")
		w.prev.Hide()
		w.next.Hide()
		w.body.Objects = nil
		w.body.Refresh()
		w.countdown.SetText("")
		w.scope.Hide()
		w.ticks.Objects = nil
		w.ticks.Refresh()
		w.creds.Hide()
		w.approveRun.Disable()
		w.approveOnce.Disable()
		w.approveCode.Hide()
		w.runs.Hide()
		w.deny.Disable()
		return
	}
	r := w.queue[w.cur]
	fresh := string(r.ID) != w.shownID
	if fresh {
		w.shownID, w.shownAt = string(r.ID), time.Now()
		w.detailsOpen = false
	}
	if w.noticeFor != string(r.ID) {
		w.noticeFor = ""
		w.notice.Hide()
	}
	if note := w.cardNote(); note != "" {
		w.noteLabel.SetText(note)
		w.noteLabel.Show()
	} else {
		w.noteLabel.Hide()
	}
	v := cardModel(r.Card)
	w.heading.SetText(v.Sentence)
	w.queueLabel.SetText(queueText(w.cur, len(w.queue)))
	if len(w.queue) > 1 {
		w.prev.Show()
		w.next.Show()
	} else {
		w.prev.Hide()
		w.next.Hide()
	}
	setEnabled(w.prev, w.cur > 0)
	setEnabled(w.next, w.cur < len(w.queue)-1)
	w.top.Refresh() // lay the header out again: the position text and the arrows changed size
	w.body.Objects = w.cardObjects(v)
	w.body.Refresh()
	w.renderRuns(r)
	w.renderScope(r, v)
	w.tick()
	w.approveOnce.Enable()
	if r.Card.Stale {
		// Its call was refused already: nothing to approve once.
		w.approveOnce.Hide()
		w.approveRun.SetText(allowNewCodeText)
	} else {
		w.approveOnce.Show()
		w.approveRun.SetText(approveRunText)
	}
	w.deny.Enable()
	w.updateApproveRun(r)
	if fresh {
		w.scroll.ScrollToTop()
		w.fit()
	}
	if w.win != nil {
		w.win.Canvas().Unfocus()
	}
}

// cardNote is what the cards say of the window's input check.
func (w *ApprovalWindow) cardNote() string {
	if w.inputNote == nil {
		return ""
	}
	return w.inputNote()
}

// cardWidth is the approval window's width when the screen has room.
const cardWidth = 680

// fit sizes the window to the card: as tall as its content, up to the
// screen's work area (screenArea), as wide as cardWidth or the screen. The
// sentence, the scope and the buttons are outside the scroll, so they stay
// in view whatever the height.
//
// A window keeps its top-left corner when it is resized (GLFW does, with
// or without a window manager), so a window that grows for a taller card
// would reach below the screen, its scope and buttons with it: a shown
// window that grows is centred again (Show centres one that pops up).
func (w *ApprovalWindow) fit() {
	area := screenArea(w.win)
	width, maxH := float32(cardWidth), float32(600) // a 768-pixel-high screen at 1× when the screen is unknown
	if area.Width > 0 {
		width = min(width, area.Width)
	}
	if area.Height > 0 {
		maxH = area.Height
	}
	w.capTicks(maxH)
	w.layoutFooter(width)
	// Lay out at the width first: wrapped labels know their lines then.
	content := w.win.Content()
	content.Resize(fyne.NewSize(width, maxH))
	pad := theme.Padding()
	natural := w.top.MinSize().Height + w.body.MinSize().Height + w.bottom.MinSize().Height + 4*pad + 2*theme.SeparatorThicknessSize()
	before := w.win.Canvas().Size()
	size := fyne.NewSize(width, min(natural, maxH))
	w.win.Resize(size)
	w.log.Debug("approval window sized", "screen", area, "content", natural, "size", size)
	if w.visible && size.Height > before.Height+0.5 {
		w.win.CenterOnScreen()
	}
}

// longestCountdown is as wide as countdownText gets while a request waits.
const longestCountdown = "Denied in 10:00 · Esc denies"

// layoutFooter lays the countdown and the shown buttons out for a window
// width wide: the countdown beside the buttons when both fit whole, else
// on a line of its own above them, the buttons on as many right-aligned
// lines as they need (four buttons, a narrow or scaled screen). The
// countdown is never cut to "…".
func (w *ApprovalWindow) layoutFooter(width float32) {
	var shown []fyne.CanvasObject
	for _, b := range []fyne.CanvasObject{w.deny, w.approveOnce, w.approveRun, w.approveCode} {
		if b.Visible() {
			shown = append(shown, b)
		}
	}
	pad := theme.Padding()
	avail := width - 2*pad // the window's content inset
	countW := widget.NewLabel(longestCountdown).MinSize().Width
	rowW := func(bs []fyne.CanvasObject) float32 {
		var sum float32
		for i, b := range bs {
			if i > 0 {
				sum += pad
			}
			sum += b.MinSize().Width
		}
		return sum
	}
	right := func(bs []fyne.CanvasObject) fyne.CanvasObject {
		return container.NewHBox(append([]fyne.CanvasObject{layout.NewSpacer()}, bs...)...)
	}
	if countW+pad+rowW(shown) <= avail {
		// As container.NewBorder(nil, nil, nil, buttons, w.countdown).
		buttons := container.NewHBox(w.deny, w.approveOnce, w.approveRun, w.approveCode)
		w.footer.Layout = layout.NewBorderLayout(nil, nil, nil, buttons)
		w.footer.Objects = []fyne.CanvasObject{w.countdown, buttons}
	} else {
		w.footer.Layout = layout.NewVBoxLayout()
		objs := []fyne.CanvasObject{w.countdown}
		var row []fyne.CanvasObject
		for _, b := range shown {
			if len(row) > 0 && rowW(append(slices.Clone(row), b)) > avail {
				objs = append(objs, right(row))
				row = nil
			}
			row = append(row, b)
		}
		if len(row) > 0 {
			objs = append(objs, right(row))
		}
		w.footer.Objects = objs
	}
	w.footer.Refresh()
}

// capTicks bounds the tool ticks' height: all of them when few, else a
// few rows that scroll (the scope line above them says what is granted),
// fewer on a short screen.
func (w *ApprovalWindow) capTicks(screenH float32) {
	rows := float32(4)
	if screenH < 520 {
		rows = 2
	}
	full := w.ticks.MinSize().Height
	row := widget.NewCheck("x", nil).MinSize().Height
	w.ticksScroll.SetMinSize(fyne.NewSize(0, min(full, rows*row+(rows-1)*theme.Padding())))
}

// renderScope fills the scope box: what the run approval grants, the tool
// ticks and the credential scope.
func (w *ApprovalWindow) renderScope(r authz.Request, v cardView) {
	w.ticks.Objects = nil
	for _, tt := range v.Tools {
		id, tool := r.ID, tt.Name
		c := w.check(tt.Label)
		cell := fyne.CanvasObject(c)
		if tt.Mark != "" {
			cell = container.NewHBox(c, toolBadge(tt.Mark))
		}
		if tt.Locked {
			// Approving the run approves the call that waits: its
			// tool cannot be left out (Deny refuses the call).
			c.SetChecked(true)
			c.Disable()
			w.ticks.Add(cell)
			continue
		}
		on, changed := w.picked[id][tool]
		if !changed {
			on = tt.Ticked
		}
		c.SetChecked(on)
		c.OnChanged = func(on bool) {
			if w.picked[id] == nil {
				w.picked[id] = map[string]bool{}
			}
			w.picked[id][tool] = on
			w.updateApproveRun(r)
		}
		w.ticks.Add(cell)
	}
	w.ticks.Refresh()
	if len(v.Tools) == 0 {
		w.ticksScroll.Hide()
	} else {
		w.ticksScroll.Show()
	}
	w.ticksScroll.ScrollToTop()
	w.capTicks(max(screenArea(w.win).Height, 600))
	if v.Credentials != "" {
		w.creds.SetText(v.Credentials)
		w.creds.Show()
	} else {
		w.creds.Hide()
	}
}

// updateApproveRun enables "Approve for this run" while at least one tool
// is ticked (a launch request, with no tools, always), and says above the
// ticks what it grants.
//
// A card whose credential asks on every use offers no approval for the run:
// every approval of it serves one call or launch.
func (w *ApprovalWindow) updateApproveRun(r authz.Request) {
	if r.Card.AskEveryUse {
		w.approveRun.Hide()
		w.approveCode.Hide()
		w.scope.SetText(askEveryUseText)
		w.scope.Show()
		return
	}
	w.approveRun.Show()
	runs := len(r.Card.AlsoRuns) == 0 || len(w.runsTicked(r)) > 0
	setEnabled(w.approveRun, runs && (len(r.Card.ToolScope) == 0 || len(w.ticked(r)) > 0))
	setEnabled(w.approveOnce, runs)
	if codeChoice(r.Card) {
		w.approveCode.SetText("This code, every run of " + textsafe.Line(agentProgram(r.Card)))
		w.approveCode.Show()
		setEnabled(w.approveCode, runs && len(w.ticked(r)) > 0)
	} else {
		w.approveCode.Hide()
	}
	if t := scopeText(r.Card, w.ticked(r)); t != "" {
		w.scope.SetText(t)
		w.scope.Show()
	} else {
		w.scope.Hide()
	}
}

// askEveryUseText heads the scope of a card whose credential asks on every
// use.
const askEveryUseText = "Scope: this one use only (the credential asks every time)"

func setEnabled(b fyne.Disableable, on bool) {
	if on {
		b.Enable()
	} else {
		b.Disable()
	}
}

// toggleDetails folds or unfolds the card's Details.
func (w *ApprovalWindow) toggleDetails() {
	w.detailsOpen = !w.detailsOpen
	if w.cur < len(w.queue) {
		w.body.Objects = w.cardObjects(cardModel(w.queue[w.cur].Card))
		w.body.Refresh()
		if w.detailsOpen {
			w.fit()
			w.scroll.ScrollToBottom()
		}
	}
}

// cardObjects draws the scrolling middle of a card: the stale note, the
// arguments with the defaults omitted ones take, what changed (on disk,
// then the catalog diff with its legend), and the Details, folded.
func (w *ApprovalWindow) cardObjects(v cardView) []fyne.CanvasObject {
	var objs []fyne.CanvasObject
	if v.Stale {
		note := widget.NewLabelWithStyle(v.StaleNote, fyne.TextAlignLeading, fyne.TextStyle{Italic: true})
		note.Wrapping = fyne.TextWrapWord
		objs = append(objs, note)
	}
	if v.Args != nil || v.NoArgs {
		heading := "Arguments"
		if v.Stale {
			heading = "Arguments of the refused call"
		}
		objs = append(objs, sectionHeading(heading))
		if v.NoArgs {
			objs = append(objs, dimLabel("none"))
		}
		form := container.New(layout.NewFormLayout())
		for _, a := range v.Args {
			form.Add(widget.NewLabelWithStyle(a.Name, fyne.TextAlignLeading, fyne.TextStyle{Monospace: true}))
			form.Add(argValue(a))
		}
		if len(v.Args) > 0 {
			objs = append(objs, form)
		}
	}
	if len(v.Request) > 0 {
		objs = append(objs, sectionHeading("What the server asks"))
		for _, l := range v.Request {
			lbl := widget.NewLabelWithStyle(l, fyne.TextAlignLeading, fyne.TextStyle{Monospace: true})
			lbl.Wrapping = fyne.TextWrapWord
			objs = append(objs, lbl)
		}
	}
	if len(v.Disk) > 0 || len(v.Changes) > 0 {
		objs = append(objs, sectionHeading("What changed"))
	}
	for _, d := range v.Disk {
		objs = append(objs, indentRow(badge(d.Badge, theme.ColorNameForeground), d.What+"\n"+d.Change))
	}
	if v.CatalogHeading != "" {
		// A sub-heading under "What changed", in the text's own colour:
		// the dim colour is for placeholders and asides.
		sub := widget.NewLabelWithStyle(v.CatalogHeading, fyne.TextAlignLeading, fyne.TextStyle{Italic: true})
		sub.Wrapping = fyne.TextWrapWord
		objs = append(objs, sub, legend(v.Legend))
		for _, c := range v.Changes {
			objs = append(objs, indentRow(badge(severityLabel(c.Severity)+"  ", severityColor(c.Severity)), c.Text))
		}
	}
	objs = append(objs, w.codeObjects(w.currentID())...)
	if w.detailsOpen {
		w.details.SetText("Hide details")
		w.details.SetIcon(theme.MenuDropUpIcon())
	} else {
		w.details.SetText(DetailsText)
		w.details.SetIcon(theme.MenuDropDownIcon())
	}
	objs = append(objs, w.details)
	if w.detailsOpen {
		form := container.New(layout.NewFormLayout())
		for _, f := range v.Details {
			form.Add(factLabel(f.Label))
			form.Add(valueLabel(f.Value))
		}
		objs = append(objs, form)
	}
	return objs
}

// argValue is an argument's value on the card; a default says so.
func argValue(a cardArg) fyne.CanvasObject {
	segs := []widget.RichTextSegment{&widget.TextSegment{Text: a.Value, Style: widget.RichTextStyle{
		Inline: true, TextStyle: fyne.TextStyle{Monospace: true}}}}
	if a.Default {
		segs = append(segs, &widget.TextSegment{Text: "   default: the agent left it out", Style: widget.RichTextStyle{
			Inline: true, ColorName: theme.ColorNamePlaceHolder, TextStyle: fyne.TextStyle{Italic: true}}})
	}
	t := widget.NewRichText(segs...)
	t.Wrapping = fyne.TextWrapBreak
	return t
}

// badge is a severity (or "ON DISK") badge at the start of a diff row.
func badge(text string, color fyne.ThemeColorName) fyne.CanvasObject {
	return widget.NewRichText(&widget.TextSegment{Text: text, Style: widget.RichTextStyle{
		Inline: true, ColorName: color, TextStyle: fyne.TextStyle{Monospace: true}}})
}

// legend explains the severity badges the diff shows, on one wrapped line.
func legend(entries []legendEntry) fyne.CanvasObject {
	var segs []widget.RichTextSegment
	for i, l := range entries {
		sep := ""
		if i < len(entries)-1 {
			sep = ";  "
		}
		segs = append(segs,
			&widget.TextSegment{Text: strings.TrimSpace(severityLabel(l.Severity)), Style: widget.RichTextStyle{
				Inline: true, ColorName: severityColor(l.Severity), TextStyle: fyne.TextStyle{Monospace: true}}},
			&widget.TextSegment{Text: " " + l.Meaning + sep, Style: widget.RichTextStyle{
				Inline: true, ColorName: theme.ColorNamePlaceHolder, SizeName: theme.SizeNameCaptionText}})
	}
	t := widget.NewRichText(segs...)
	t.Wrapping = fyne.TextWrapWord
	return t
}

// indentRow is a diff row: the badge on the left, the text beside it in
// its own column, so that its wrapped lines keep their indent.
func indentRow(b fyne.CanvasObject, text string) fyne.CanvasObject {
	l := widget.NewLabel(text)
	l.Wrapping = fyne.TextWrapWord
	return container.NewBorder(nil, nil, b, nil, l)
}

// dimLabel is secondary text.
func dimLabel(s string) *widget.Label {
	l := widget.NewLabel(s)
	l.Importance = widget.LowImportance
	l.Wrapping = fyne.TextWrapWord
	return l
}

// scopeText says, beside the buttons, what the run approval of card c
// grants with the tools ticked now: the person sees it whatever part of
// the card is scrolled into view. "" for a card without tools (a launch).
func scopeText(c authz.Card, ticked []string) string {
	if c.Identity != "" {
		return "Scope: “" + approveRunText + "” lets this code receive " + strings.Join(c.CredentialScope, ", ") +
			" at its launches in this agent run; “" + approveOnceText + "”, at this launch only"
	}
	if len(c.Offered()) == 0 {
		return ""
	}
	button := approveRunText
	if c.Stale {
		button = allowNewCodeText
	}
	n := len(c.Offered()) - len(ticked)
	names := make([]string, len(ticked))
	for i, n := range ticked {
		names[i] = textsafe.Name(n, c.Offered()) // a server's text: escaped and flagged
	}
	t := "Scope: “" + button + "” grants " + strings.Join(names, ", ")
	if n > 0 {
		t += fmt.Sprintf(" (%d more not ticked)", n)
	}
	return t
}

// toolBadge marks a tool the catalog revision added ("new") or whose
// contract changed ("changed").
func toolBadge(mark string) fyne.CanvasObject {
	color := theme.ColorNameWarning
	if mark == "new" {
		color = theme.ColorNameError
	}
	t := widget.NewRichText(&widget.TextSegment{Text: mark, Style: widget.RichTextStyle{
		Inline: true, ColorName: color, TextStyle: fyne.TextStyle{Bold: true}}})
	return t
}

func factLabel(s string) *widget.Label {
	return widget.NewLabelWithStyle(s, fyne.TextAlignTrailing, fyne.TextStyle{Bold: true})
}

func valueLabel(s string) *widget.Label {
	l := widget.NewLabel(s)
	l.Wrapping = fyne.TextWrapBreak
	return l
}

func sectionHeading(s string) fyne.CanvasObject {
	return widget.NewLabelWithStyle(s, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
}

// escButton is a button that passes Escape to the window: Escape denies
// the request shown whatever has the keyboard focus (a focused widget
// receives the keys the canvas would otherwise get).
type escButton struct {
	widget.Button
	escape func()
	reveal func(fyne.CanvasObject)
	// by is told how the button is being activated, just before its
	// OnTapped runs: "button" (a click) or "key" (Space on the focused
	// button).
	by func(string)
}

// Tapped is a click (the driver's pointer event).
func (b *escButton) Tapped(ev *fyne.PointEvent) {
	if b.by != nil {
		b.by(platformButton)
	}
	b.Button.Tapped(ev)
}

func (w *ApprovalWindow) button(text string, icon fyne.Resource, tapped func()) *escButton {
	b := &escButton{escape: w.escape, reveal: w.reveal, by: func(k string) { w.by = k }}
	b.Text, b.Icon, b.OnTapped = text, icon, tapped
	b.ExtendBaseWidget(b)
	return b
}

// FocusGained scrolls the button into view (Tab may reach the Details
// toggle below the fold).
func (b *escButton) FocusGained() {
	if b.reveal != nil {
		b.reveal(b)
	}
	b.Button.FocusGained()
}

func (b *escButton) TypedKey(ev *fyne.KeyEvent) {
	if ev.Name == fyne.KeyEscape {
		b.escape()
		return
	}
	if b.by != nil {
		b.by(platformKey)
	}
	b.Button.TypedKey(ev)
}

// How an approve button was activated (InputCheck.Judge's by): the press
// behind the decision must be of that kind, so that a key the person
// typed into the window, which took the focus as it appeared, does not
// carry a click an agent sent, nor a click of theirs a key it sent.
const (
	platformButton = "button"
	platformKey    = "key"
)

// escCheck is a tool check box that passes Escape to the window.
type escCheck struct {
	widget.Check
	escape func()
	reveal func(fyne.CanvasObject)
}

func (w *ApprovalWindow) check(text string) *escCheck {
	c := &escCheck{escape: w.escape, reveal: w.reveal}
	c.Text = text
	c.ExtendBaseWidget(c)
	return c
}

// FocusGained scrolls the check box into view: Tab reaches ticks that the
// scope's scroll hides.
func (c *escCheck) FocusGained() {
	if c.reveal != nil {
		c.reveal(c)
	}
	c.Check.FocusGained()
}

func (c *escCheck) TypedKey(ev *fyne.KeyEvent) {
	if ev.Name == fyne.KeyEscape {
		c.escape()
		return
	}
	c.Check.TypedKey(ev)
}

// reveal scrolls whichever of the window's scrolls holds o so that o is
// in view: what has the keyboard focus is never hidden.
func (w *ApprovalWindow) reveal(o fyne.CanvasObject) {
	if w.win == nil {
		return
	}
	d := w.app.Driver()
	for _, sc := range []*container.Scroll{w.scroll, w.ticksScroll} {
		if sc == nil || !contains(sc.Content, o) {
			continue
		}
		y := d.AbsolutePositionForObject(o).Y - d.AbsolutePositionForObject(sc.Content).Y
		off := sc.Offset
		switch {
		case y < off.Y:
			off.Y = y
		case y+o.Size().Height > off.Y+sc.Size().Height:
			off.Y = y + o.Size().Height - sc.Size().Height
		default:
			return
		}
		sc.ScrollToOffset(off)
		return
	}
}

// contains reports whether o is root or in the containers under it (the
// card's widgets sit in containers, never inside other widgets).
func contains(root, o fyne.CanvasObject) bool {
	if root == o {
		return true
	}
	c, ok := root.(*fyne.Container)
	if !ok {
		return false
	}
	for _, k := range c.Objects {
		if contains(k, o) {
			return true
		}
	}
	return false
}

// escape denies the request shown (the Escape key), and gives the keyboard
// back to the window.
func (w *ApprovalWindow) escape() {
	if w.win != nil {
		w.win.Canvas().Unfocus()
	}
	// Over a dialog, Escape answers the dialog the safe way, and denies
	// nothing behind it: the closing confirmation keeps the window open,
	// the notice goes away.
	if d := w.closing; d != nil {
		w.closing = nil
		d.Hide()
		return
	}
	if d := w.unrecorded; d != nil {
		w.unrecorded = nil
		d.Hide()
		return
	}
	if d := w.diff; d != nil {
		w.diff = nil
		d.Hide()
		return
	}
	if w.cur >= len(w.queue) {
		w.hide() // no card: Escape closes the window
		return
	}
	w.decide(authz.Deny)
}

// DetailsText is the label of the toggle that unfolds a card's Details.
const DetailsText = "Details (epochs, digests, pids)"

// Button returns the shown, enabled button of the window labelled text
// (Approve for this run, Allow the new code for this run, Approve once,
// Deny, DetailsText), or nil: tests drive the real window with it.
func (w *ApprovalWindow) Button(text string) *widget.Button {
	for _, b := range []*escButton{w.approveRun, w.approveOnce, w.deny, w.details} {
		if b != nil && b.Text == text && !b.Disabled() && b.Visible() {
			return &b.Button
		}
	}
	return nil
}
