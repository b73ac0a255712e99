package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/driver"
)

// nativeHandle returns w's handle on the display server, the one the input
// check compares a press's window with (X11: the window's id), so that a
// click somewhere else on the screen never answers for a click this window
// received. 0 where there is none to compare (Fyne's test driver, macOS,
// Wayland): the input check then judges the press alone.
func nativeHandle(w fyne.Window) uint64 {
	nw, ok := w.(driver.NativeWindow)
	if !ok {
		return 0
	}
	var h uint64
	nw.RunNative(func(ctx any) {
		if x, ok := ctx.(driver.X11WindowContext); ok {
			h = uint64(x.WindowHandle)
		}
	})
	return h
}
