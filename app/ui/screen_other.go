//go:build ci || !cgo || wasm

package ui

import "fyne.io/fyne/v2"

// testScreen is the screen tests pretend to have (physical pixels, before
// the canvas scale and the title bar); zero: unknown.
var testScreen fyne.Size

// screenArea is testScreen in Fyne units of win's canvas, less a window
// title bar; zero when unknown. Builds without GLFW (the headless test
// driver) know no monitor.
func screenArea(win fyne.Window) fyne.Size {
	if testScreen.IsZero() || win == nil {
		return fyne.Size{}
	}
	scale := win.Canvas().Scale()
	if scale <= 0 {
		scale = 1
	}
	return fyne.NewSize(testScreen.Width/scale, (testScreen.Height-titleBarPixels)/scale)
}
