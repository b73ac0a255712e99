//go:build !darwin

package ui

import (
	"fyne.io/fyne/v2"

	"github.com/portcullis/portcullis/assets"
)

// trayImages are the colour tray icons (44 px: trays scale them down): Linux
// panels do not tint template images, and may be dark or light.
var trayImages = map[TrayState][]byte{
	TrayReady:    assets.PanelReady2x,
	TrayApproval: assets.PanelApproval2x,
	TrayFailed:   assets.PanelFailed2x,
}

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
