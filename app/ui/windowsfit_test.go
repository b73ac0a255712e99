package ui

import (
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// buttonInView fails t unless the button labelled text is shown wholly
// inside win's canvas.
func buttonInView(t *testing.T, win fyne.Window, text string) {
	t.Helper()
	d := fyne.CurrentApp().Driver()
	cs := win.Canvas().Size()
	for _, o := range test.LaidOutObjects(win.Content()) {
		b, ok := o.(*widget.Button)
		if !ok || b.Text != text || !b.Visible() {
			continue
		}
		p, s := d.AbsolutePositionForObject(b), b.Size()
		if p.X < 0 || p.Y < 0 || p.X+s.Width > cs.Width+0.5 || p.Y+s.Height > cs.Height+0.5 {
			t.Errorf("%q at %v size %v is outside the %v window", text, p, s, cs)
		}
		return
	}
	t.Errorf("no button %q shown", text)
}

// TestWindowsFit: Preferences (each tab, a server open) and the audit
// viewer fit 1280×800 and 1024×640 at 1× and 1280×800 at 2×, with Save,
// Refresh and Verify in view.
func TestWindowsFit(t *testing.T) {
	for _, sc := range layoutScreens {
		t.Run(sc.name, func(t *testing.T) {
			testScreen = sc.screen
			t.Cleanup(func() { testScreen = fyne.Size{} })
			check := func(what string, win fyne.Window, want fyne.Size, buttons ...string) {
				t.Helper()
				win.Canvas().(test.WindowlessCanvas).SetScale(sc.scale)
				fitWindow(win, want)
				area := screenArea(win)
				if m := win.Content().MinSize(); m.Width > area.Width+0.5 || m.Height > area.Height+0.5 {
					t.Errorf("%s needs %v, more than the screen's %v", what, m, area)
				}
				if cs := win.Canvas().Size(); cs.Width > area.Width+0.5 || cs.Height > area.Height+0.5 {
					t.Errorf("%s opens at %v, larger than the screen's %v", what, cs, area)
				}
				for _, b := range buttons {
					buttonInView(t, win, b)
				}
			}
			f := newPrefsFixture(t, prefsConfig)
			f.p.servers.edit("inv")
			check("Preferences, Servers", f.window, prefsSize, "Save", "Revert")
			f.p.tabs.SelectIndex(1)
			check("Preferences, Credentials", f.window, prefsSize)
			f.p.tabs.SelectIndex(2)
			check("Preferences, General", f.window, prefsSize)
			v := newTestAuditView(t, AuditDeps{Dir: t.TempDir()})
			check("the audit viewer", v.win, auditSize, "Refresh", "Verify")
		})
	}
}
