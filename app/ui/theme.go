package ui

import (
	"image/color"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/theme"

	"github.com/portcullis/portcullis/assets"
	"github.com/portcullis/portcullis/core/catalog"
)

// severityColor is the theme colour of a catalog change's severity on the
// approval card: authority changes in the error colour (red), contract
// changes in the warning colour (orange), cosmetic ones in the
// placeholder colour (grey).
func severityColor(s catalog.Severity) fyne.ThemeColorName {
	switch s {
	case catalog.Authority:
		return theme.ColorNameError
	case catalog.Contract:
		return theme.ColorNameWarning
	}
	return theme.ColorNamePlaceHolder
}

// severityLabel is the badge text of a severity, upper case and padded to
// one width so that the summaries after it line up.
func severityLabel(s catalog.Severity) string {
	switch s {
	case catalog.Authority:
		return "AUTHORITY"
	case catalog.Contract:
		return "CONTRACT "
	case catalog.Cosmetic:
		return "COSMETIC "
	}
	return "CHANGE   "
}

// trayResources are the menu-bar icons of the three tray states, made once
// (trayImages: template images on macOS, colour ones elsewhere).
var trayResources = map[TrayState]fyne.Resource{
	TrayReady:    trayIcon("portcullis-tray-ready.png", trayImages[TrayReady]),
	TrayApproval: trayIcon("portcullis-tray-approval.png", trayImages[TrayApproval]),
	TrayFailed:   trayIcon("portcullis-tray-failed.png", trayImages[TrayFailed]),
}

// checkOffIcon is the icon of a menu entry that is off.
var checkOffIcon = fyne.NewStaticResource("portcullis-check-off.png", assets.CheckOff)

// appIcon is the colour application icon (windows, notifications).
var appIcon = fyne.NewStaticResource("portcullis.png", assets.Icon)

// AppIcon returns the colour application icon as a Fyne resource.
func AppIcon() fyne.Resource { return appIcon }

// examplesTheme is the app's theme with placeholders drawn halfway between
// the placeholder colour and the background: the examples in empty fields
// of Preferences ("e.g. node") must not read as values.
type examplesTheme struct{}

var _ fyne.Theme = examplesTheme{}

func (examplesTheme) base() fyne.Theme { return fyne.CurrentApp().Settings().Theme() }

func (t examplesTheme) Color(n fyne.ThemeColorName, v fyne.ThemeVariant) color.Color {
	c := t.base().Color(n, v)
	if n != theme.ColorNamePlaceHolder {
		return c
	}
	return mixColors(c, t.base().Color(theme.ColorNameInputBackground, v))
}

func (t examplesTheme) Font(s fyne.TextStyle) fyne.Resource     { return t.base().Font(s) }
func (t examplesTheme) Icon(n fyne.ThemeIconName) fyne.Resource { return t.base().Icon(n) }
func (t examplesTheme) Size(n fyne.ThemeSizeName) float32       { return t.base().Size(n) }

// mixColors is the colour halfway between a and b, opaque.
func mixColors(a, b color.Color) color.Color {
	ar, ag, ab, _ := a.RGBA()
	br, bg, bb, _ := b.RGBA()
	return color.NRGBA{R: uint8((ar + br) >> 9), G: uint8((ag + bg) >> 9), B: uint8((ab + bb) >> 9), A: 0xff}
}

// example is the placeholder of a field showing an example value.
func example(s string) string { return "e.g. " + s }
