package ui

import (
	"strings"
	"testing"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/test"
)

// wheelOver turns the wheel by dy over the middle of o in c.
func wheelOver(c fyne.Canvas, o fyne.CanvasObject, dy float32) {
	at := fyne.CurrentApp().Driver().AbsolutePositionForObject(o).Add(fyne.NewPos(o.Size().Width/2, o.Size().Height/2))
	test.Scroll(c, at, 0, dy)
}

func TestPrefsWheelScrollsForm(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	f.window.Resize(fyne.NewSize(760, 360))
	c := f.window.Canvas()
	s := f.p.servers
	form := s.editorPanel.Objects[0].(*container.Scroll)

	// A single-line field with text longer than its box: the wheel over it
	// scrolls the form, and the field keeps its width.
	width := s.command.MinSize().Width
	s.command.SetText(strings.Repeat("/very/long/path", 40))
	if got := s.command.MinSize().Width; got != width {
		t.Errorf("a long command widens its field from %v to %v", width, got)
	}
	wheelOver(c, s.command, -30)
	if form.Offset.Y <= 0 {
		t.Fatalf("wheel over the command field: form offset %v, want scrolled down", form.Offset.Y)
	}

	// A multi-line field whose lines fit passes the wheel on too.
	before := form.Offset.Y
	wheelOver(c, s.args, -30)
	if form.Offset.Y <= before {
		t.Errorf("wheel over a short arguments box: form offset %v, was %v", form.Offset.Y, before)
	}

	// One whose lines overflow scrolls itself, not the form.
	s.args.SetText(strings.Repeat("--flag\n", 30))
	before = form.Offset.Y
	wheelOver(c, s.args, -30)
	if form.Offset.Y != before {
		t.Errorf("wheel over an overflowing arguments box moved the form from %v to %v", before, form.Offset.Y)
	}
	if inner := s.args.innerScroll(); inner == nil || inner.Offset.Y <= 0 {
		t.Errorf("wheel over an overflowing arguments box did not scroll its lines")
	}

	// The General tab's fields do the same.
	f.p.tabs.SelectIndex(2)
	g := f.p.general
	f.window.Resize(fyne.NewSize(760, 260))
	gform := g.approve.wheel.(*container.Scroll)
	wheelOver(c, g.approve, -30)
	if gform.Offset.Y <= 0 {
		t.Errorf("wheel over the approval timeout: General offset %v, want scrolled down", gform.Offset.Y)
	}
}

// Every entry of the Preferences forms passes the wheel to its form.
func TestPrefsEntriesWheelToForm(t *testing.T) {
	f := newPrefsFixture(t, prefsConfig)
	s, g, cr := f.p.servers, f.p.general, f.p.creds
	for name, e := range map[string]*formEntry{"label": s.label, "command": s.command, "args": s.args, "cwd": s.cwd,
		"env": s.env, "watch": s.watch, "newTool": s.newTool, "approvalTimeout": g.approve, "holdTimeout": g.hold,
		"scope": cr.scope, "envVar": cr.envVar, "secret": cr.secret} {
		if e.wheel == nil {
			t.Errorf("%s: the wheel over it does not reach the form", name)
		}
	}
}
