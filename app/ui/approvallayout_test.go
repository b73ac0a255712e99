package ui

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"

	"github.com/portcullis/portcullis/core/authz"
)

// layoutScreens are the screens the approval card must fit: a laptop at
// 1×, a small screen at 1×, and the laptop at scale 2 (640×380 Fyne units
// below a title bar).
var layoutScreens = []struct {
	name   string
	screen fyne.Size
	scale  float32
}{
	{"1280x800 at 1x", fyne.NewSize(1280, 800), 1},
	{"1024x640 at 1x", fyne.NewSize(1024, 640), 1},
	{"1280x800 at 2x", fyne.NewSize(1280, 800), 2},
}

// manyToolsCard is a first card offering twelve tools: more ticks than the
// scope box shows at once on a short screen.
func manyToolsCard() authz.Card {
	c := firstCard()
	c.OtherTools = nil
	for i := range 11 {
		c.OtherTools = append(c.OtherTools, fmt.Sprintf("tool_number_%02d", i))
	}
	return c
}

func layoutCards() map[string]authz.Card {
	stale := rebuildCard()
	stale.Stale = true
	return map[string]authz.Card{"rebuild": rebuildCard(), "launch": launchCard(), "stale": stale,
		"first use": firstCard(), "twelve tools": manyToolsCard()}
}

// newScreenWindow is an approval window on a pretend screen at a scale,
// showing reqs.
func newScreenWindow(t *testing.T, screen fyne.Size, scale float32, reqs ...authz.Request) *ApprovalWindow {
	t.Helper()
	testScreen = screen
	t.Cleanup(func() { testScreen = fyne.Size{} })
	a := test.NewTempApp(t)
	f := newFakeApprovals(reqs...)
	w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
	w.ensure()
	w.win.Canvas().(test.WindowlessCanvas).SetScale(scale)
	w.sync(f.Pending())
	return w
}

// inView reports whether o is shown and lies wholly inside the canvas of
// w, and inside the viewport of the scroll holding it, if any: seen
// without scrolling anything.
func inView(w *ApprovalWindow, o fyne.CanvasObject) error {
	if !o.Visible() {
		return fmt.Errorf("hidden")
	}
	d := w.app.Driver()
	p, s, cs := d.AbsolutePositionForObject(o), o.Size(), w.win.Canvas().Size()
	if s.Width <= 0 || s.Height <= 0 {
		return fmt.Errorf("no size (%v)", s)
	}
	if p.X < 0 || p.Y < 0 || p.X+s.Width > cs.Width+0.5 || p.Y+s.Height > cs.Height+0.5 {
		return fmt.Errorf("at %v size %v, outside the %v canvas", p, s, cs)
	}
	if contains(w.body, o) {
		return fmt.Errorf("inside the card's scroll")
	}
	if contains(w.ticks, o) {
		sp := d.AbsolutePositionForObject(w.ticksScroll)
		if p.Y < sp.Y-0.5 || p.Y+s.Height > sp.Y+w.ticksScroll.Size().Height+0.5 {
			return fmt.Errorf("at %v size %v, scrolled out of the ticks' view (%v, height %v)", p, s, sp, w.ticksScroll.Size().Height)
		}
	}
	return nil
}

// TestApprovalLayoutFits: at every screen size and scale, the window fits
// the screen and the buttons and the scope (what the run approval grants,
// the tool ticks up to a few rows, the credentials) are in view without
// scrolling.
func TestApprovalLayoutFits(t *testing.T) {
	for _, sc := range layoutScreens {
		for name, card := range layoutCards() {
			t.Run(sc.name+"/"+name, func(t *testing.T) {
				w := newScreenWindow(t, sc.screen, sc.scale, request("apr_1", 0, card))
				area := screenArea(w.win)
				if cs := w.win.Canvas().Size(); cs.Height > area.Height+0.5 || cs.Width > area.Width+0.5 {
					t.Errorf("window %v larger than the screen's %v", cs, area)
				}
				if m := w.win.Content().MinSize(); m.Height > area.Height+0.5 {
					t.Errorf("content needs %v, more than the screen's %v", m, area)
				}
				want := map[string]fyne.CanvasObject{"Deny": w.deny, "the sentence": w.heading}
				if w.approveOnce.Visible() {
					want["Approve once"] = w.approveOnce
				}
				if !card.AskEveryUse {
					want["Approve for this run"] = w.approveRun
				}
				want["the scope line"] = w.scope // every card here has a scope
				if len(card.CredentialScope) > 0 {
					want["the credentials"] = w.creds
				}
				shown := 0
				for i, o := range w.ticks.Objects {
					if i < 4 { // at least two rows of ticks in view
						want[fmt.Sprintf("tick %d", i)] = o
					}
					if inView(w, o) == nil {
						shown++
					}
				}
				for what, o := range want {
					if err := inView(w, o); err != nil {
						t.Errorf("%s is not in view: %v", what, err)
					}
				}
				if n := len(w.ticks.Objects); n > 0 && n <= 6 && shown != n {
					t.Errorf("%d of %d tool ticks in view", shown, n)
				}
			})
		}
	}
}

// TestApprovalSizesToContent: a short card gets a short window, a long one
// the screen's height.
func TestApprovalSizesToContent(t *testing.T) {
	short := newScreenWindow(t, fyne.NewSize(1280, 800), 1, request("apr_1", 0, firstCard()))
	area := screenArea(short.win)
	if h := short.win.Canvas().Size().Height; h >= area.Height-50 {
		t.Errorf("a first-use card is %v high on a %v-high screen: not sized to its content", h, area.Height)
	}
	long := newScreenWindow(t, fyne.NewSize(1280, 800), 2, request("apr_1", 0, rebuildCard()))
	if h, a := long.win.Canvas().Size().Height, screenArea(long.win).Height; h < a-0.5 {
		t.Errorf("a rebuild card at 2x is %v high, the screen %v: it scrolls though there is room", h, a)
	}
}

// TestApprovalFocusScrollsIntoView: Tab (focus) on a tick hidden in the
// scope's scroll, or on the Details toggle below the fold, scrolls it into
// view.
func TestApprovalFocusScrollsIntoView(t *testing.T) {
	w := newScreenWindow(t, fyne.NewSize(1280, 800), 2, request("apr_1", 0, manyToolsCard()))
	last := w.ticks.Objects[len(w.ticks.Objects)-1].(*escCheck)
	if inView(w, last) == nil {
		t.Fatal("the last of twelve ticks is in view at 2x before focus: the test proves nothing")
	}
	w.win.Canvas().Focus(last)
	if err := inView(w, last); err != nil {
		t.Errorf("the focused tick is not scrolled into view: %v", err)
	}

	w = newScreenWindow(t, fyne.NewSize(1280, 800), 2, request("apr_1", 0, rebuildCard()))
	d := w.app.Driver()
	below := func() bool {
		y := d.AbsolutePositionForObject(w.details).Y - d.AbsolutePositionForObject(w.scroll).Y
		return y+w.details.Size().Height > w.scroll.Size().Height || y < 0
	}
	if !below() {
		t.Fatal("the Details toggle is in view at 2x before focus: the test proves nothing")
	}
	w.win.Canvas().Focus(w.details)
	if below() {
		t.Errorf("the focused Details toggle is not scrolled into view (offset %v)", w.scroll.Offset)
	}
}
