//go:build darwin

package platform

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego/objc"
)

// Notifier shows notifications on macOS through NotifierOptions.Fallback
// (Fyne's SendNotification), which cannot be clicked: onClick is never
// called, and the approval window opens by itself anyway.
//
// Withdraw removes a delivered notification from the Notification Center
// (UNUserNotificationCenter removeDeliveredNotificationsWithIdentifiers:,
// through the Objective-C runtime with purego: no cgo). Fyne names the
// requests it posts "fyne-notify-N", N counting from 1 in the process; this
// Notifier counts the notifications it sends through the fallback, which
// names them alike as long as nothing else in the app sends notifications
// through Fyne (the tray sends all of its own through this Notifier).
// Unbundled or unauthorised, Fyne falls back to a script notification,
// which cannot be removed: Withdraw then does nothing. Written without a
// Mac; it type-checks here but has not run.
//
// Future work: a clickable notification needs UNUserNotificationCenter with
// a delegate (userNotificationCenter:didReceiveNotificationResponse:), which
// macOS grants only to a signed app bundle with a bundle identifier; it can
// be written with purego/objc like the activation policy in app/ui.
type Notifier struct {
	opts NotifierOptions

	mu    sync.Mutex
	sent  int               // guarded by mu; notifications sent through Fyne
	shown map[string]string // guarded by mu; key → Fyne's request identifier
}

// NewNotifier returns the Notifier of this system.
func NewNotifier(o NotifierOptions) *Notifier { return &Notifier{opts: o, shown: map[string]string{}} }

// Notify shows title and body through the fallback, under key; onClick is
// ignored. A second notification under the same key removes the first.
// Without a fallback it fails with ErrNoNotifications.
func (n *Notifier) Notify(key, title, body string, onClick func()) error {
	if n.opts.Fallback == nil {
		return fmt.Errorf("%w: no notification fallback configured on macOS", ErrNoNotifications)
	}
	_ = n.Withdraw(key)
	n.opts.Fallback(title, body)
	n.mu.Lock()
	n.sent++
	n.shown[key] = fmt.Sprintf("fyne-notify-%d", n.sent)
	n.mu.Unlock()
	return nil
}

// Withdraw removes the notification shown under key from the Notification
// Center; nothing when none is shown, or when the app is not a bundle
// (UNUserNotificationCenter is unavailable then).
func (n *Notifier) Withdraw(key string) error {
	n.mu.Lock()
	ident, ok := n.shown[key]
	delete(n.shown, key)
	n.mu.Unlock()
	if !ok {
		return nil
	}
	return removeDelivered(ident)
}

// removeDelivered removes the delivered notification request ident.
func removeDelivered(ident string) error {
	bundle := objc.ID(objc.GetClass("NSBundle")).Send(objc.RegisterName("mainBundle"))
	if bundle == 0 || bundle.Send(objc.RegisterName("bundleIdentifier")) == 0 {
		// [UNUserNotificationCenter currentNotificationCenter] raises
		// outside a bundle, and Fyne sent a script notification instead.
		return nil
	}
	cls := objc.GetClass("UNUserNotificationCenter")
	if cls == 0 {
		return fmt.Errorf("%w: UserNotifications is not loaded", ErrNoNotifications)
	}
	center := objc.ID(cls).Send(objc.RegisterName("currentNotificationCenter"))
	str := objc.ID(objc.GetClass("NSString")).Send(objc.RegisterName("stringWithUTF8String:"), ident)
	arr := objc.ID(objc.GetClass("NSArray")).Send(objc.RegisterName("arrayWithObject:"), str)
	center.Send(objc.RegisterName("removeDeliveredNotificationsWithIdentifiers:"), arr)
	return nil
}

// Close does nothing.
func (n *Notifier) Close() error { return nil }
