package ui

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/theme"

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

// placedWindow models where the GLFW driver puts a window on the screen:
// CenterOnScreen asked before the first Show centres it at that Show,
// asked later centres it at once; otherwise the window keeps its top-left
// corner when resized, hidden and shown again. (The test driver has no
// screen position.)
type placedWindow struct {
	fyne.Window
	centre, shown bool
	pos           fyne.Position
}

func (w *placedWindow) centreNow() {
	area, s := screenArea(w.Window), w.Canvas().Size()
	w.pos = fyne.NewPos((area.Width-s.Width)/2, (area.Height-s.Height)/2)
}

func (w *placedWindow) CenterOnScreen() {
	w.centre = true
	if w.shown {
		w.centreNow()
	}
	w.Window.CenterOnScreen()
}

func (w *placedWindow) Show() {
	if !w.shown && w.centre {
		w.centreNow()
	}
	w.shown = true
	w.Window.Show()
}

// onScreen says where w lies outside the screen's work area, if it does.
func (w *placedWindow) onScreen() error {
	area, s := screenArea(w.Window), w.Canvas().Size()
	if w.pos.X < -0.5 || w.pos.Y < -0.5 || w.pos.X+s.Width > area.Width+0.5 || w.pos.Y+s.Height > area.Height+0.5 {
		return fmt.Errorf("window at %v size %v reaches outside the %v screen", w.pos, s, area)
	}
	return nil
}

// placingApp makes placedWindows.
type placingApp struct {
	fyne.App
	last *placedWindow
}

func (a *placingApp) NewWindow(title string) fyne.Window {
	a.last = &placedWindow{Window: a.App.NewWindow(title)}
	return a.last
}

// TestApprovalWindowStaysOnScreen: a card taller than the one before
// (a rebuild card after a first-use card, popping up again or replacing
// it in a shown window, or its Details unfolded) keeps the window inside
// the screen, scope and buttons with it. The real app under Xvfb at scale
// 2 (2560×1600) kept the first card's top-left corner and showed the
// rebuild card's scope and buttons below the screen's edge.
func TestApprovalWindowStaysOnScreen(t *testing.T) {
	screens := append(slices.Clone(layoutScreens), struct {
		name   string
		screen fyne.Size
		scale  float32
	}{"2560x1600 at 2x", fyne.NewSize(2560, 1600), 2})
	for _, sc := range screens {
		t.Run(sc.name, func(t *testing.T) {
			testScreen = sc.screen
			t.Cleanup(func() { testScreen = fyne.Size{} })
			a := &placingApp{App: test.NewTempApp(t)}
			f := newFakeApprovals(request("apr_1", 0, firstCard()))
			w := newApprovalWindow(a, f, func() time.Time { return testNow }, slog.New(slog.DiscardHandler))
			w.ensure()
			w.win.Canvas().(test.WindowlessCanvas).SetScale(sc.scale)
			pw := a.last
			check := func(what string) {
				t.Helper()
				if err := pw.onScreen(); err != nil {
					t.Errorf("%s: %v", what, err)
				}
				for name, o := range map[string]fyne.CanvasObject{"Deny": w.deny, "the scope line": w.scope} {
					if err := inView(w, o); err != nil {
						t.Errorf("%s: %s is not in view: %v", what, name, err)
					}
				}
			}
			w.sync(f.Pending())
			check("the first card")
			firstH := w.win.Canvas().Size().Height

			w.decide(authz.Deny) // the window hides
			f.pending = []authz.Request{request("apr_2", 1, rebuildCard())}
			w.sync(f.Pending())
			if w.win.Canvas().Size().Height <= firstH+0.5 {
				t.Fatalf("the rebuild card is %v high, the first card %v: the test proves nothing", w.win.Canvas().Size().Height, firstH)
			}
			check("a rebuild card popping up after a first card")

			w.decide(authz.Deny)
			f.pending = []authz.Request{request("apr_3", 2, firstCard()), request("apr_4", 3, rebuildCard())}
			w.sync(f.Pending())  // a first card pops up
			w.decide(authz.Deny) // the rebuild card replaces it, the window shown
			if !w.Visible() || w.currentID() != "apr_4" {
				t.Fatalf("the window shows %q (visible %v), want apr_4", w.currentID(), w.Visible())
			}
			check("a rebuild card after a first card in the shown window")

			w.toggleDetails()
			check("the rebuild card with its Details unfolded")
		})
	}
}

// TestApprovalCountdownReadable: with four buttons (a card that offers
// "this code, every run of AGENT"), the countdown is shown whole, not cut
// to "…", at every screen size and scale; and it stays beside the buttons
// when there is room (three buttons).
func TestApprovalCountdownReadable(t *testing.T) {
	four := rebuildCard()
	four.Code = "sha256:c0de"
	if !codeChoice(four) {
		t.Fatal("the test card offers no code choice")
	}
	for _, sc := range layoutScreens {
		for name, card := range map[string]authz.Card{"four buttons": four, "first use": firstCard()} {
			t.Run(sc.name+"/"+name, func(t *testing.T) {
				w := newScreenWindow(t, sc.screen, sc.scale, request("apr_1", 0, card))
				if w.approveCode.Visible() != (name == "four buttons") {
					t.Fatalf("approve-code button visible: %t", w.approveCode.Visible())
				}
				text := w.countdown.Text
				if !strings.HasPrefix(text, "Denied in") {
					t.Fatalf("countdown %q", text)
				}
				if err := inView(w, w.countdown); err != nil {
					t.Fatalf("the countdown is not in view: %v", err)
				}
				whole := fyne.MeasureText(text, theme.TextSize(), fyne.TextStyle{}).Width + 2*theme.InnerPadding()
				if got := w.countdown.Size().Width; got+0.5 < whole {
					t.Errorf("the countdown %q is %.0f wide, cut short of the %.0f it needs", text, got, whole)
				}
				for what, b := range map[string]fyne.CanvasObject{"Deny": w.deny, "Approve for this run": w.approveRun, "This code, every run": w.approveCode} {
					if err := inView(w, b); err != nil && b.Visible() {
						t.Errorf("%s is not in view: %v", what, err)
					}
				}
			})
		}
	}
}
