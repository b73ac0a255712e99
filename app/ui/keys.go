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
