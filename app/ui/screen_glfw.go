//go:build !ci && cgo && !wasm

package ui

import (
	"fyne.io/fyne/v2"
	"github.com/go-gl/glfw/v3.3/glfw"
)

// screenArea is the work area (the screen less its panels and docks) of
// the primary monitor in Fyne units of win's canvas, less a window title
// bar; zero when unknown. It runs on the Fyne goroutine, where GLFW may be
// called.
func screenArea(win fyne.Window) fyne.Size {
	m := glfw.GetPrimaryMonitor()
	if m == nil || win == nil {
		return fyne.Size{}
	}
	_, _, w, h := m.GetWorkarea()
	scale := win.Canvas().Scale()
	if w <= 0 || h <= 0 || scale <= 0 {
		return fyne.Size{}
	}
	return fyne.NewSize(float32(w)/scale, float32(h-titleBarPixels)/scale)
}
