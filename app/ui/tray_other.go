//go:build !darwin

package ui

import "fyne.io/fyne/v2"

// setAccessoryPolicy does nothing outside macOS: other desktops have no
// Dock icon to hide.
func setAccessoryPolicy() {}

// activateApp does nothing outside macOS: RequestFocus on the window is what
// the window manager honours there.
func activateApp() {}

// trayIcon returns the tray PNG as it is: Linux panels do not tint
// template images.
func trayIcon(name string, png []byte) fyne.Resource {
	return fyne.NewStaticResource(name, png)
}
