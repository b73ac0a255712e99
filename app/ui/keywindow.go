package ui

import (
	"fmt"
	"image"
	"strings"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/canvas"
	"fyne.io/fyne/v2/container"
	"fyne.io/fyne/v2/layout"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
	qrcode "github.com/skip2/go-qrcode"

	"github.com/portcullis/portcullis/core/daemon"
)

// keyQRSize is the side of the verification key's QR code, in pixels of
// the image (the window scales it to keyQRShown Fyne units).
const (
	keyQRSize  = 512
	keyQRShown = 220
	// The window's size, in Fyne units: the heading, four lines of
	// explanation, the key, the QR code, what approvals are and the button
	// row.
	keyWindowWidth  = 560
	keyWindowHeight = 760
)

// keyQR is the QR code of the verification key text, as an image: a phone
// can carry the key off the machine without typing it.
func keyQR(key string) (image.Image, error) {
	q, err := qrcode.New(key, qrcode.Medium)
	if err != nil {
		return nil, fmt.Errorf("making the QR code of the verification key: %w", err)
	}
	q.DisableBorder = false
	return q.Image(keyQRSize), nil
}

// Texts of the verification key window.
const (
	keyWindowTitle = "Portcullis — audit log verification key"
	keyDoneText    = "I wrote it down"
	keyExplain     = "Portcullis seals its audit log with a key that changes every 15 minutes and forgets the old one, " +
		"so that code running as you cannot rewrite what was sealed. This verification key proves the seals. " +
		"It is shown only now: keep it outside this computer (on paper, in a password manager, or scan the code " +
		"with your phone). `portcullis audit verify --key KEY` checks the log with it."
)

// KeyWindow shows the audit log's verification key once, on first start,
// with its QR code, until the person says they wrote it down. Closing the
// window otherwise asks first: the key is not shown again.
type KeyWindow struct {
	win    fyne.Window
	qr     *canvas.Image
	key    *widget.Label
	auth   *widget.Label // whether approvals are OS-authenticated, and what that means
	done   *widget.Button
	asking bool
}

// approvalsText says, for the first-run window, whether approvals are
// OS-authenticated, which mode is in force and why, and what that means.
func approvalsText(st daemon.AuthStatus) string {
	mode := st.Mode
	if st.Setting == "" {
		mode += ", the default"
	}
	var b strings.Builder
	if st.OSAuthenticated {
		fmt.Fprintf(&b, "Approvals: OS-authenticated by %s (settings.approvalAuthentication %s). ", st.Mechanism, mode)
	} else {
		fmt.Fprintf(&b, "Approvals: NOT OS-authenticated (settings.approvalAuthentication %s). ", mode)
	}
	b.WriteString(st.Meaning)
	if !st.OSAuthenticated && st.Unavailable != "" && st.Reason != daemon.AuthReasonOff {
		b.WriteString(" Why: " + st.Unavailable)
	}
	return b.String()
}

// showKeyWindow opens the verification key window for key (Fyne
// goroutine), with what auth says of approvals below the key.
func showKeyWindow(a fyne.App, key string, auth daemon.AuthStatus) (*KeyWindow, error) {
	img, err := keyQR(key)
	if err != nil {
		return nil, err
	}
	k := &KeyWindow{win: a.NewWindow(keyWindowTitle)}
	k.win.SetIcon(appIcon)
	heading := widget.NewLabelWithStyle("Write down the audit log's verification key", fyne.TextAlignLeading, fyne.TextStyle{Bold: true})
	heading.SizeName = theme.SizeNameSubHeadingText
	explain := widget.NewLabel(keyExplain)
	explain.Wrapping = fyne.TextWrapWord
	k.key = widget.NewLabelWithStyle(keyLines(key), fyne.TextAlignCenter, fyne.TextStyle{Monospace: true})
	k.key.Wrapping = fyne.TextWrapBreak
	k.key.Selectable = true
	k.qr = canvas.NewImageFromImage(img)
	k.qr.FillMode = canvas.ImageFillContain
	k.qr.ScaleMode = canvas.ImageScalePixels
	k.qr.SetMinSize(fyne.NewSize(keyQRShown, keyQRShown))
	k.auth = widget.NewLabel(approvalsText(auth))
	k.auth.Wrapping = fyne.TextWrapWord
	if !auth.OSAuthenticated {
		k.auth.Importance = widget.WarningImportance
	}
	k.done = widget.NewButtonWithIcon(keyDoneText, theme.ConfirmIcon(), k.win.Close)
	body := container.NewVBox(heading, explain, k.key, container.NewCenter(k.qr), k.auth)
	k.win.SetContent(container.NewBorder(nil, container.NewHBox(layout.NewSpacer(), k.done), nil, nil, container.NewVScroll(body)))
	k.win.SetCloseIntercept(k.closeRequested)
	k.win.Canvas().SetOnTypedKey(func(ev *fyne.KeyEvent) {
		if ev.Name == fyne.KeyEscape {
			k.closeRequested()
		}
	})
	k.win.Canvas().AddShortcut(closeShortcut, func(fyne.Shortcut) { k.closeRequested() })
	// The body scrolls, so its scroll container asks for no height of its
	// own: the window is given the height that shows the key and its QR
	// code whole (or the screen's, when smaller).
	fitWindow(k.win, fyne.NewSize(keyWindowWidth, keyWindowHeight))
	k.win.CenterOnScreen()
	activateApp()
	k.win.Show()
	return k, nil
}

// closeRequested asks before the window goes without "I wrote it down".
func (k *KeyWindow) closeRequested() {
	if k.asking {
		return
	}
	k.asking = true
	d := askDialog("Close without the key?",
		"The verification key is not shown again. Without it, `audit verify` cannot prove the seals "+
			"(`portcullis audit setup-keys --force` makes new keys; the log before them stays unproven).", k.win,
		keepChoice("Keep it open", func() { k.asking = false }),
		destroyChoice("Close anyway", nil, func() { k.asking = false; k.win.Close() }))
	d.Show()
}

// keyGroupsPerLine is how many dash-separated groups of the key one line
// shows.
const keyGroupsPerLine = 10

// keyLines breaks the key into lines between its groups, each line but the
// last ending in its dash: wrapped by the label, a line broke inside a
// group ("J5" / "5K"), which reads as two groups. The parser ignores the
// line breaks, so the text copied from the window is the key.
func keyLines(key string) string {
	groups := strings.Split(key, "-")
	var b strings.Builder
	for i, g := range groups {
		b.WriteString(g)
		switch {
		case i == len(groups)-1:
		case (i+1)%keyGroupsPerLine == 0:
			b.WriteString("-\n")
		default:
			b.WriteString("-")
		}
	}
	return b.String()
}
