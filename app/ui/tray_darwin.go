//go:build darwin

package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"
	"github.com/ebitengine/purego/objc"

	"github.com/portcullis/portcullis/assets"
)

// trayImages are the template images of the tray states: the menu bar
// tints them for its light and dark appearance.
var trayImages = map[TrayState][]byte{
	TrayReady:    assets.TrayReady,
	TrayApproval: assets.TrayApproval,
	TrayFailed:   assets.TrayFailed,
}

// nsApplicationActivationPolicyAccessory is NSApplicationActivationPolicy
// value 1 (AppKit, NSRunningApplication.h): no Dock icon, no menu bar of
// its own, but windows may come to the front.
const nsApplicationActivationPolicyAccessory = 1

// sharedApplication returns [NSApplication sharedApplication], or 0 when
// AppKit is not loaded in this process (a build without the GLFW driver,
// such as the headless -tags ci build).
func sharedApplication() objc.ID {
	cls := objc.GetClass("NSApplication")
	if cls == 0 {
		return 0
	}
	return objc.ID(cls).Send(objc.RegisterName("sharedApplication"))
}

// setAccessoryPolicy makes Portcullis an accessory app: a menu-bar icon
// without a Dock icon. LSUIElement in Info.plist is not enough because GLFW
// resets the activation policy at launch, so this runs after the driver
// started, on the main thread (inside fyne.Do). Calls go through the
// Objective-C runtime with purego: no cgo, so that a CGO_ENABLED=0 darwin
// build type-checks this file.
func setAccessoryPolicy() {
	if app := sharedApplication(); app != 0 {
		app.Send(objc.RegisterName("setActivationPolicy:"), nsApplicationActivationPolicyAccessory)
	}
}

// activateApp brings Portcullis in front of the other applications
// ([NSApp activateIgnoringOtherApps:YES]). An accessory app is never the
// active one by itself, so a window it shows would open behind the agent's
// window without this. Main thread only.
func activateApp() {
	if app := sharedApplication(); app != 0 {
		app.Send(objc.RegisterName("activateIgnoringOtherApps:"), true)
	}
}

// trayIcon wraps a template PNG so that the macOS menu bar treats it as a
// template image (Fyne passes a *theme.ThemedResource to
// systray.SetTemplateIcon) and tints it for light and dark menu bars. Fyne
// tries to recolour the PNG as SVG first, logs that it cannot, and falls
// back to the PNG bytes, which is what the template image needs.
func trayIcon(name string, png []byte) fyne.Resource {
	return theme.NewThemedResource(fyne.NewStaticResource(name, png))
}
