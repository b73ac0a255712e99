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
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"

	"github.com/portcullis/portcullis/core/authz"
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

	win     fyne.Window                // created on first use
	queue   []authz.Request            // oldest first
	cur     int                        // index of the request shown
	ticks   map[string]map[string]bool // request → tool → ticked, where the person changed the proposal
	popped  map[string]bool            // pending requests the window popped up for
	visible bool

	// guard is how long after a card appears (the window popped up, or the
	// next request of the queue replaced the one decided) its approve
	// buttons ignore clicks: a click aimed at what was there before, or a
	// double click, must not approve a request the person has not seen.
	// Deny is never held back. shownID and shownAt say which card appeared
	// when (wall clock, not the countdown's clock).
	guard   time.Duration
	shownID string
	shownAt time.Time

	heading     *widget.Label
	queueLabel  *widget.Label
	prev, next  *escButton
	body        *fyne.Container
	scroll      *container.Scroll
	countdown   *widget.Label
	scope       *widget.Label // what the run approval grants now, beside its button whatever the scroll
	approveRun  *escButton
	approveOnce *escButton
	deny        *escButton

	top        *fyne.Container // heading, queue position and arrows
	closingMsg *widget.Label   // the question of the closing confirmation
	closing    dialog.Dialog   // the confirmation shown when closing would deny several requests
	unrecorded dialog.Dialog   // the notice shown when an approval could not be recorded
}

func newApprovalWindow(app fyne.App, auth Approvals, clock func() time.Time, log *slog.Logger) *ApprovalWindow {
	return &ApprovalWindow{app: app, auth: auth, clock: clock, log: log, ticks: map[string]map[string]bool{}, popped: map[string]bool{}}
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
	w.heading.Truncation = fyne.TextTruncateEllipsis
	w.queueLabel = widget.NewLabel("")
	w.prev = w.button("", theme.NavigateBackIcon(), func() { w.move(-1) })
	w.next = w.button("", theme.NavigateNextIcon(), func() { w.move(+1) })
	w.prev.Importance, w.next.Importance = widget.LowImportance, widget.LowImportance
	w.body = container.NewVBox()
	w.scroll = container.NewVScroll(w.body)
	w.countdown = widget.NewLabel("")
	w.countdown.Wrapping = fyne.TextWrapWord
	w.scope = widget.NewLabelWithStyle("", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	w.scope.Wrapping = fyne.TextWrapWord
	w.deny = w.button(denyText, theme.CancelIcon(), func() { w.decide(authz.Deny) })
	w.approveOnce = w.button(approveOnceText, theme.ConfirmIcon(), func() { w.decide(authz.ApproveOnce) })
	w.approveRun = w.button(approveRunText, theme.ConfirmIcon(), func() { w.decide(authz.ApproveRun) })

	w.top = container.NewBorder(nil, nil, nil, container.NewHBox(w.queueLabel, w.prev, w.next), w.heading)
	top := w.top
	buttons := container.NewHBox(layout.NewSpacer(), w.deny, w.approveOnce, w.approveRun)
	bottom := container.NewVBox(widget.NewSeparator(), w.scope, w.countdown, buttons)
	w.win.SetContent(container.NewBorder(container.NewVBox(top, widget.NewSeparator()), bottom, nil, nil, w.scroll))
	// Small enough for a 768-pixel-high screen at scale 1 (the card
	// scrolls; the buttons and the countdown stay in view).
	w.win.Resize(fyne.NewSize(680, 600))
	w.win.CenterOnScreen()
	w.win.SetCloseIntercept(w.closeRequested)
	w.win.Canvas().SetOnTypedKey(func(ev *fyne.KeyEvent) {
		if ev.Name == fyne.KeyEscape {
			w.escape()
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
	for id := range w.ticks {
		if !slices.ContainsFunc(w.queue, func(r authz.Request) bool { return r.ID == id }) {
			delete(w.ticks, id)
		}
	}
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
	w.render()
	activateApp()
	w.win.Show()
	w.win.RequestFocus()
	w.win.Canvas().Unfocus() // no control takes Enter
	w.visible = true
}

// ShowRequest shows request id (a notification was clicked) if it is still
// pending, else the oldest one.
func (w *ApprovalWindow) ShowRequest(id string) {
	for i, r := range w.queue {
		if r.ID == id {
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
		ids = append(ids, r.ID)
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

func (w *ApprovalWindow) currentID() string {
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
	if choice != authz.Deny && w.guard > 0 {
		if since := time.Since(w.shownAt); since < w.guard {
			w.log.Info("approval click ignored: the card appeared just before", "request", r.ID, "after", since.Round(time.Millisecond))
			return
		}
	}
	d := authz.Decision{Choice: choice, By: "app"}
	if choice == authz.ApproveRun {
		d.Tools = w.ticked(r)
	}
	w.queue = slices.Delete(w.queue, w.cur, w.cur+1)
	delete(w.ticks, r.ID)
	if w.cur >= len(w.queue) && w.cur > 0 {
		w.cur--
	}
	err := w.auth.Decide(r.ID, d)
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
	d := dialog.NewCustomConfirm("Deny every waiting request?", closeDenyText, closeKeepText, w.closingMsg, w.closeAnswer, w.win)
	d.SetConfirmImportance(widget.DangerImportance) // it denies, it does not confirm
	d.Resize(fyne.NewSize(420, 0))
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
		on, changed := w.ticks[r.ID][t]
		if t == r.Card.Tool || (changed && on) || (!changed && slices.Contains(r.Card.ToolScope, t)) {
			out = append(out, t)
		}
	}
	return out
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
		w.approveRun.Disable()
		w.approveOnce.Disable()
		w.deny.Disable()
		return
	}
	r := w.queue[w.cur]
	if r.ID != w.shownID {
		w.shownID, w.shownAt = r.ID, time.Now()
	}
	v := cardModel(r.Card)
	w.heading.SetText("Approve " + v.Title + "?")
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
	w.body.Objects = w.cardObjects(r, v)
	w.body.Refresh()
	w.scroll.ScrollToTop()
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
	if w.win != nil {
		w.win.Canvas().Unfocus()
	}
}

// updateApproveRun enables "Approve for this run" while at least one tool
// is ticked (a launch request, with no tools, always).
//
// A card whose credential asks on every use offers no approval for the run:
// every approval of it serves one call or launch.
func (w *ApprovalWindow) updateApproveRun(r authz.Request) {
	if r.Card.AskEveryUse {
		w.approveRun.Hide()
		w.scope.Hide()
		return
	}
	w.approveRun.Show()
	setEnabled(w.approveRun, len(r.Card.ToolScope) == 0 || len(w.ticked(r)) > 0)
	if t := scopeText(r.Card, w.ticked(r)); t != "" {
		w.scope.SetText(t)
		w.scope.Show()
	} else {
		w.scope.Hide()
	}
}

func setEnabled(b fyne.Disableable, on bool) {
	if on {
		b.Enable()
	} else {
		b.Disable()
	}
}

// cardObjects draws a card: reason, facts, the catalog diff with
// colour-coded severities, the call with its defaults, the tool scope as
// checkboxes, then the digests that changed on disk (what a person decides
// on first, the evidence last: the window is small enough for a laptop
// screen, so the card scrolls).
func (w *ApprovalWindow) cardObjects(r authz.Request, v cardView) []fyne.CanvasObject {
	reason := widget.NewLabelWithStyle(v.Reason, fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	reason.Wrapping = fyne.TextWrapWord
	objs := []fyne.CanvasObject{reason}

	form := container.New(layout.NewFormLayout())
	for _, f := range v.Facts {
		form.Add(factLabel(f.Label))
		form.Add(valueLabel(f.Value))
	}
	if v.Credentials != "" {
		form.Add(factLabel("Credentials"))
		form.Add(valueLabel(v.Credentials))
	}
	objs = append(objs, form)

	if v.CatalogHeading != "" {
		objs = append(objs, sectionHeading(v.CatalogHeading))
		var segs []widget.RichTextSegment
		for _, c := range v.Changes {
			segs = append(segs,
				&widget.TextSegment{Text: severityLabel(c.Severity) + "  ", Style: widget.RichTextStyle{
					Inline: true, ColorName: severityColor(c.Severity), TextStyle: fyne.TextStyle{Monospace: true}}},
				&widget.TextSegment{Text: c.Text, Style: widget.RichTextStyleParagraph},
			)
		}
		diff := widget.NewRichText(segs...)
		diff.Wrapping = fyne.TextWrapWord
		objs = append(objs, diff)
	}
	if v.Stale {
		note := widget.NewLabelWithStyle(v.StaleNote, fyne.TextAlignLeading, fyne.TextStyle{Italic: true})
		note.Wrapping = fyne.TextWrapWord
		objs = append(objs, note)
	}
	if v.Call != "" {
		heading := "Call"
		if v.Stale {
			heading = "Refused call"
		}
		objs = append(objs, sectionHeading(heading), monoLabel(v.Call))
		for _, d := range v.Defaults {
			objs = append(objs, monoLabel("  "+d))
		}
	}
	if len(v.Tools) > 0 {
		objs = append(objs, sectionHeading(toolsHeading(v)))
		checks := container.NewGridWithColumns(2)
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
				checks.Add(cell)
				continue
			}
			on, changed := w.ticks[id][tool]
			if !changed {
				on = tt.Ticked
			}
			c.SetChecked(on)
			c.OnChanged = func(on bool) {
				if w.ticks[id] == nil {
					w.ticks[id] = map[string]bool{}
				}
				w.ticks[id][tool] = on
				w.updateApproveRun(r)
				w.win.Canvas().Unfocus() // keep Escape for the window
			}
			checks.Add(cell)
		}
		objs = append(objs, checks)
	}
	if len(v.Disk) > 0 {
		objs = append(objs, sectionHeading("Changed on disk"))
		for _, l := range v.Disk {
			objs = append(objs, monoLabel(l))
		}
	}
	return objs
}

// scopeText says, beside the buttons, what the run approval of card c
// grants with the tools ticked now: the person sees it whatever part of
// the card is scrolled into view. "" for a card without tools (a launch).
func scopeText(c authz.Card, ticked []string) string {
	if c.Identity != "" || len(c.Offered()) == 0 {
		return ""
	}
	button := approveRunText
	if c.Stale {
		button = allowNewCodeText
	}
	n := len(c.Offered()) - len(ticked)
	t := "“" + button + "” grants " + strings.Join(ticked, ", ")
	if n > 0 {
		t += fmt.Sprintf(" (%d more not ticked)", n)
	}
	return t
}

// toolsHeading heads the tool check boxes: what the ticks mean, and that
// nothing but the ticked tools is granted.
func toolsHeading(v cardView) string {
	button := approveRunText
	if v.Stale {
		button = allowNewCodeText
	}
	for _, t := range v.Tools {
		if !t.Ticked {
			return "“" + button + "” covers the ticked tools; tick others to add them"
		}
	}
	return "“" + button + "” covers the ticked tools"
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

func monoLabel(s string) *widget.Label {
	l := widget.NewLabelWithStyle(s, fyne.TextAlignLeading, fyne.TextStyle{Monospace: true})
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
}

func (w *ApprovalWindow) button(text string, icon fyne.Resource, tapped func()) *escButton {
	b := &escButton{escape: w.escape}
	b.Text, b.Icon, b.OnTapped = text, icon, tapped
	b.ExtendBaseWidget(b)
	return b
}

func (b *escButton) TypedKey(ev *fyne.KeyEvent) {
	if ev.Name == fyne.KeyEscape {
		b.escape()
		return
	}
	b.Button.TypedKey(ev)
}

// escCheck is a tool check box that passes Escape to the window.
type escCheck struct {
	widget.Check
	escape func()
}

func (w *ApprovalWindow) check(text string) *escCheck {
	c := &escCheck{escape: w.escape}
	c.Text = text
	c.ExtendBaseWidget(c)
	return c
}

func (c *escCheck) TypedKey(ev *fyne.KeyEvent) {
	if ev.Name == fyne.KeyEscape {
		c.escape()
		return
	}
	c.Check.TypedKey(ev)
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
	w.decide(authz.Deny)
}

// Button returns the shown, enabled button of the window labelled text
// (Approve for this run, Allow the new code for this run, Approve once,
// Deny), or nil: tests drive the real window with it.
func (w *ApprovalWindow) Button(text string) *widget.Button {
	for _, b := range []*escButton{w.approveRun, w.approveOnce, w.deny} {
		if b != nil && b.Text == text && !b.Disabled() && b.Visible() {
			return &b.Button
		}
	}
	return nil
}
