package ui

import (
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"fyne.io/fyne/v2/widget"
)

// TestCloseKeys: Escape and Ctrl/Cmd+W close a window set up with
// closeOnKeys, unless Escape answered a question first; the approval
// window with no card closes on both, and on a card Ctrl/Cmd+W does
// nothing (closing would deny).
func TestCloseKeys(t *testing.T) {
	a := test.NewTempApp(t)
	open := func() (fyne.Window, *bool) {
		w := a.NewWindow("w")
		w.SetContent(widget.NewLabel("x"))
		closed := new(bool)
		w.SetOnClosed(func() { *closed = true })
		return w, closed
	}
	w, closed := open()
	closeOnKeys(w, nil, nil)
	w.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: fyne.KeyEscape})
	if !*closed {
		t.Error("Escape does not close the window")
	}
	w, closed = open()
	closeOnKeys(w, nil, nil)
	ctrlW(w)
	if !*closed {
		t.Error("Ctrl/Cmd+W does not close the window")
	}
	w, closed = open()
	asked := true
	closeOnKeys(w, func() bool { return asked }, nil)
	w.Canvas().OnTypedKey()(&fyne.KeyEvent{Name: fyne.KeyEscape})
	if *closed {
		t.Error("Escape over a question closed the window")
	}
	w.Close()

	aw, f := newTestWindow(t, request("apr_1", 0, rebuildCard()))
	ctrlW(aw.win)
	if !aw.Visible() || len(f.decisions()) != 0 {
		t.Errorf("Ctrl/Cmd+W on a card: visible %v, decisions %v; want the card kept, nothing decided", aw.Visible(), f.decisions())
	}
	aw.sync(nil) // decided elsewhere: no card left
	aw.Show()    // the window opened on nothing (the menu, a stale click)
	ctrlW(aw.win)
	if aw.Visible() {
		t.Error("Ctrl/Cmd+W does not close the approval window without a card")
	}
	aw.Show()
	typeKey(aw, fyne.KeyEscape)
	if aw.Visible() {
		t.Error("Escape does not close the approval window without a card")
	}
}

// ctrlW types Ctrl+W (Cmd+W on macOS) into w.
func ctrlW(w fyne.Window) { w.Canvas().(fyne.Shortcutable).TypedShortcut(closeShortcut) }

// TestCloseKeysInTextField: Ctrl/Cmd+W reaches Preferences while a text
// field has the keyboard (the driver gives a shortcut to the focused
// widget, and an entry keeps every shortcut it gets): with unsaved edits
// it asks first, as the window does; other shortcuts stay the entry's.
func TestCloseKeysInTextField(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	c := f.window.Canvas()
	s := f.p.servers
	s.edit("inv")
	c.Focus(s.command)
	s.command.SetText("/usr/bin/node2")
	s.command.TypedShortcut(&fyne.ShortcutSelectAll{})
	if got := s.command.SelectedText(); got != "/usr/bin/node2" {
		t.Errorf("Select All in the field selected %q, want the field's text", got)
	}
	if c.Overlays().Top() != nil {
		t.Fatal("a question is open before Ctrl/Cmd+W")
	}
	c.Focused().(fyne.Shortcutable).TypedShortcut(closeShortcut) // as the driver does
	if c.Overlays().Top() == nil {
		t.Error("Ctrl/Cmd+W in a text field with unsaved edits did not ask about them: it did not reach the window")
	}
}
