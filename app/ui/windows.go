package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver/desktop"
)

// closeOnKeys makes Escape and Ctrl+W (Cmd+W on macOS) close win, through
// closeFn when not nil (which may ask first), else win.Close. escape, when
// not nil, runs first on Escape and returns true when it handled the key
// (it dismissed a question over the window): the window stays open then.
// It replaces the canvas's typed-key handler.
func closeOnKeys(win fyne.Window, escape func() bool, closeFn func()) {
	if closeFn == nil {
		closeFn = win.Close
	}
	win.Canvas().SetOnTypedKey(func(ev *fyne.KeyEvent) {
		if ev.Name != fyne.KeyEscape {
			return
		}
		if escape != nil && escape() {
			return
		}
		closeFn()
	})
	win.Canvas().AddShortcut(closeShortcut, func(fyne.Shortcut) { closeFn() })
}

// closeShortcut is Ctrl+W, or Cmd+W on macOS.
var closeShortcut = &desktop.CustomShortcut{KeyName: fyne.KeyW, Modifier: fyne.KeyModifierShortcutDefault}

// fitWindow sizes win to want, or less where the screen's work area is
// smaller (screenArea; want when unknown), so that a window never opens
// larger than the screen at any scale. Its content must scroll where it
// does not fit.
func fitWindow(win fyne.Window, want fyne.Size) {
	area := screenArea(win)
	if area.Width > 0 {
		want.Width = min(want.Width, area.Width)
	}
	if area.Height > 0 {
		want.Height = min(want.Height, area.Height)
	}
	win.Resize(want)
}
