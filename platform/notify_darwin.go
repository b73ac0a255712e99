//go:build darwin

package platform

import "fmt"

// Notifier shows notifications on macOS through NotifierOptions.Fallback
// (Fyne's SendNotification), which cannot be clicked: onClick is never
// called, and the approval window opens by itself anyway.
//
// Future work: a clickable notification needs UNUserNotificationCenter with
// a delegate (userNotificationCenter:didReceiveNotificationResponse:), which
// macOS grants only to a signed app bundle with a bundle identifier; it can
// be written with purego/objc like the activation policy in app/ui.
type Notifier struct {
	opts NotifierOptions
}

// NewNotifier returns the Notifier of this system.
func NewNotifier(o NotifierOptions) *Notifier { return &Notifier{opts: o} }

// Notify shows title and body through the fallback; onClick is ignored.
// Without a fallback it fails with ErrNoNotifications.
func (n *Notifier) Notify(title, body string, onClick func()) error {
	if n.opts.Fallback == nil {
		return fmt.Errorf("%w: no notification fallback configured on macOS", ErrNoNotifications)
	}
	n.opts.Fallback(title, body)
	return nil
}

// Close does nothing.
func (n *Notifier) Close() error { return nil }
