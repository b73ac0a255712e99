package ui

import (
	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/dialog"
	"fyne.io/fyne/v2/driver/desktop"
	"fyne.io/fyne/v2/theme"
	"fyne.io/fyne/v2/widget"
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

// choice is one answer of a question (askDialog): its button's text, icon
// and importance, and what it does.
type choice struct {
	Text       string
	Icon       fyne.Resource
	Importance widget.Importance
	Do         func()
}

// keepChoice is the answer that leaves things as they are, with a neutral
// check mark (Fyne's confirm dialog gives it ✕, as if it were a refusal).
func keepChoice(text string, do func()) choice {
	return choice{Text: text, Icon: theme.ConfirmIcon(), Do: do}
}

// destroyChoice is an answer that discards, removes or turns off
// something: a warning icon (or icon, when given) and the danger colour.
func destroyChoice(text string, icon fyne.Resource, do func()) choice {
	if icon == nil {
		icon = theme.WarningIcon()
	}
	return choice{Text: text, Icon: icon, Importance: widget.DangerImportance, Do: do}
}

// askDialog is a question over win whose buttons say what they do, with
// icons that match: keep first (the left), then the other answers. A
// dismissal without an answer (Escape, or the window hiding the dialog)
// is keep. message is shown wrapped.
func askDialog(title, message string, win fyne.Window, keep choice, others ...choice) *dialog.CustomDialog {
	l := widget.NewLabel(message)
	l.Wrapping = fyne.TextWrapWord
	return askDialogWith(title, l, win, keep, others...)
}

// askDialogWith is askDialog with content of the caller's.
func askDialogWith(title string, content fyne.CanvasObject, win fyne.Window, keep choice, others ...choice) *dialog.CustomDialog {
	d := dialog.NewCustomWithoutButtons(title, content, win)
	answered := false
	button := func(c choice) fyne.CanvasObject {
		b := widget.NewButtonWithIcon(c.Text, c.Icon, func() {
			answered = true
			d.Hide()
			if c.Do != nil {
				c.Do()
			}
		})
		b.Importance = c.Importance
		return b
	}
	buttons := []fyne.CanvasObject{button(keep)}
	for _, c := range others {
		buttons = append(buttons, button(c))
	}
	d.SetButtons(buttons)
	d.SetOnClosed(func() {
		if !answered && keep.Do != nil {
			answered = true
			keep.Do()
		}
	})
	d.Resize(fyne.NewSize(questionWidth, 0))
	return d
}

// questionWidth is the width of askDialog's questions.
const questionWidth = 440

// formEntry is a widget.Entry that passes Ctrl/Cmd+W (closeShortcut) on to
// its window's canvas: a focused entry takes every shortcut, so the
// window's Ctrl/Cmd+W did nothing while the person was typing.
type formEntry struct {
	widget.Entry
	wheel fyne.Scrollable // the form's scroller, which gets the wheel (prefs_wheel.go)
	drawn *wheelRenderer
}

func newFormEntry() *formEntry {
	e := &formEntry{}
	e.Wrapping = fyne.TextWrap(fyne.TextTruncateClip) // as widget.NewEntry
	e.ExtendBaseWidget(e)
	return e
}

// newFormMultiLineEntry is newFormEntry for several lines.
func newFormMultiLineEntry() *formEntry {
	e := newFormEntry()
	e.MultiLine = true
	return e
}

// newFormPasswordEntry is newFormEntry for a secret: concealed, with the
// entry's reveal button.
func newFormPasswordEntry() *formEntry {
	e := newFormEntry()
	e.Password = true
	return e
}

// TypedShortcut gives Ctrl/Cmd+W to the window, every other shortcut to
// the entry.
func (e *formEntry) TypedShortcut(s fyne.Shortcut) {
	if s.ShortcutName() == closeShortcut.ShortcutName() {
		if c := fyne.CurrentApp().Driver().CanvasForObject(e); c != nil {
			if sc, ok := c.(fyne.Shortcutable); ok {
				sc.TypedShortcut(s)
				return
			}
		}
	}
	e.Entry.TypedShortcut(s)
}
