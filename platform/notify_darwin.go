//go:build darwin

package platform

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"
)

// Notifier shows notifications on macOS through the UserNotifications
// framework (UNUserNotificationCenter), with a delegate so that a click
// opens the card: a click on the notification, or on its "Review" action,
// runs the onClick given to Notify. Calls go through the Objective-C
// runtime with purego (no cgo), as the tray's activation policy does.
//
// macOS gives UNUserNotificationCenter only to an app bundle with a bundle
// identifier (`make app`: dev.portcullis.app, signed ad hoc), and shows
// its notifications once the person allowed them (asked at the first
// Notify). Outside a bundle (a `portcullis` run from a terminal),
// currentNotificationCenter raises: Notify then uses
// NotifierOptions.Fallback (Fyne's notification, which cannot be
// clicked; the approval window opens by itself anyway).
//
// Written and type-checked without a Mac; its pure parts (notifyAction)
// are unit-tested on every system. It has not run on macOS.
type Notifier struct {
	opts NotifierOptions

	mu      sync.Mutex
	clicks  map[string]func() // guarded by mu; key (the request identifier) → onClick
	center  objc.ID           // guarded by mu; 0 until set up, or outside a bundle
	tried   bool              // guarded by mu; setup ran
	fellBak bool              // guarded by mu; notifications go through the fallback
}

// NewNotifier returns the Notifier of this system.
func NewNotifier(o NotifierOptions) *Notifier { return &Notifier{opts: o, clicks: map[string]func(){}} }

// notifyCategory identifies the approval notifications' category (which
// carries the Review action).
const notifyCategory = "dev.portcullis.approval"

// UNNotificationActionOptionForeground (UNNotificationAction.h): the
// action brings the app to the front.
const unNotificationActionOptionForeground = 1 << 2

// UNAuthorizationOptionBadge|Sound|Alert (UNUserNotificationCenter.h).
const unAuthorizationOptions = 1<<0 | 1<<1 | 1<<2

// UNNotificationPresentationOptionList|Banner (macOS 11): shown while the
// app is in front too.
const unPresentationListBanner = 1<<3 | 1<<4

var (
	delegateOnce  sync.Once
	delegateClass objc.Class
	delegateErr   error
	// notifiers receive the delegate's responses: the delegate is one
	// object for the process, as the notification center is.
	notifierMu sync.Mutex
	notifier   *Notifier
)

// registerDelegate defines PortcullisNotificationDelegate, an NSObject
// conforming to UNUserNotificationCenterDelegate.
func registerDelegate() (objc.Class, error) {
	delegateOnce.Do(func() {
		var protocols []*objc.Protocol
		if p := objc.GetProtocol("UNUserNotificationCenterDelegate"); p != nil {
			protocols = append(protocols, p)
		}
		delegateClass, delegateErr = objc.RegisterClass("PortcullisNotificationDelegate", objc.GetClass("NSObject"), protocols, nil,
			[]objc.MethodDef{
				{
					// userNotificationCenter:didReceiveNotificationResponse:withCompletionHandler:
					Cmd: objc.RegisterName("userNotificationCenter:didReceiveNotificationResponse:withCompletionHandler:"),
					Fn: func(self objc.ID, _ objc.SEL, center, response objc.ID, done objc.Block) {
						action := goString(response.Send(objc.RegisterName("actionIdentifier")))
						ident := goString(response.Send(objc.RegisterName("notification")).
							Send(objc.RegisterName("request")).Send(objc.RegisterName("identifier")))
						notifierMu.Lock()
						n := notifier
						notifierMu.Unlock()
						if n != nil && notifyAction(action) {
							n.clicked(ident)
						}
						callBlock(done)
					},
				},
				{
					// userNotificationCenter:willPresentNotification:withCompletionHandler:
					Cmd: objc.RegisterName("userNotificationCenter:willPresentNotification:withCompletionHandler:"),
					Fn: func(self objc.ID, _ objc.SEL, center, notification objc.ID, done objc.Block) {
						callBlock(done, unPresentationListBanner)
					},
				},
			})
	})
	return delegateClass, delegateErr
}

// callBlock calls a block the system handed over (a completion handler):
// Block.Invoke knows only blocks made with objc.NewBlock, so the block's
// invoke pointer is called directly (Block ABI: isa, flags, reserved,
// invoke), with the block as its first argument.
func callBlock(b objc.Block, args ...uintptr) {
	if b == 0 {
		return
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(&b))
	invoke := *(*uintptr)(unsafe.Add(p, 2*unsafe.Sizeof(uintptr(0))))
	purego.SyscallN(invoke, append([]uintptr{uintptr(b)}, args...)...)
}

// goString is an NSString's UTF-8 text ("" for nil).
func goString(s objc.ID) string {
	if s == 0 {
		return ""
	}
	return objc.Send[string](s, objc.RegisterName("UTF8String"))
}

func nsString(s string) objc.ID {
	return objc.ID(objc.GetClass("NSString")).Send(objc.RegisterName("stringWithUTF8String:"), s)
}

// setup finds the notification center, installs the delegate and the
// Review category, and asks the person to allow notifications; outside
// a bundle it leaves center 0. n.mu held.
func (n *Notifier) setupLocked() {
	if n.tried {
		return
	}
	n.tried = true
	bundle := objc.ID(objc.GetClass("NSBundle")).Send(objc.RegisterName("mainBundle"))
	if bundle == 0 || bundle.Send(objc.RegisterName("bundleIdentifier")) == 0 {
		n.fellBak = true // [UNUserNotificationCenter currentNotificationCenter] raises outside a bundle
		return
	}
	cls := objc.GetClass("UNUserNotificationCenter")
	if cls == 0 {
		n.fellBak = true // UserNotifications is not loaded
		return
	}
	dc, err := registerDelegate()
	if err != nil {
		n.opts.logger().Warn("notifications: the delegate class cannot be defined; clicks will not open the card", "err", err)
		n.fellBak = true
		return
	}
	center := objc.ID(cls).Send(objc.RegisterName("currentNotificationCenter"))
	delegate := objc.ID(dc).Send(objc.RegisterName("new"))
	center.Send(objc.RegisterName("setDelegate:"), delegate)
	notifierMu.Lock()
	notifier = n
	notifierMu.Unlock()

	empty := objc.ID(objc.GetClass("NSArray")).Send(objc.RegisterName("array"))
	review := objc.ID(objc.GetClass("UNNotificationAction")).Send(objc.RegisterName("actionWithIdentifier:title:options:"),
		nsString(notifyReview), nsString("Review"), uint(unNotificationActionOptionForeground))
	actions := objc.ID(objc.GetClass("NSArray")).Send(objc.RegisterName("arrayWithObject:"), review)
	category := objc.ID(objc.GetClass("UNNotificationCategory")).Send(objc.RegisterName("categoryWithIdentifier:actions:intentIdentifiers:options:"),
		nsString(notifyCategory), actions, empty, uint(0))
	center.Send(objc.RegisterName("setNotificationCategories:"),
		objc.ID(objc.GetClass("NSSet")).Send(objc.RegisterName("setWithObject:"), category))
	log := n.opts.logger()
	center.Send(objc.RegisterName("requestAuthorizationWithOptions:completionHandler:"), uint(unAuthorizationOptions),
		objc.NewBlock(func(_ objc.Block, granted bool, err objc.ID) {
			if !granted {
				log.Info("notifications: the person has not allowed Portcullis's notifications (System Settings, Notifications)")
			}
		}))
	n.center = center
}

// Notify shows title and body under key with a Review action; a click on
// it, or on Review, runs onClick (on a thread of the framework's: onClick
// must use fyne.Do for UI work). A second notification under the same key
// replaces the first.
func (n *Notifier) Notify(key, title, body string, onClick func()) error {
	n.mu.Lock()
	n.setupLocked()
	center, fallback := n.center, n.fellBak
	if !fallback {
		n.clicks[key] = onClick
	}
	n.mu.Unlock()
	if fallback {
		if n.opts.Fallback == nil {
			return fmt.Errorf("%w: not running as an app bundle, and no fallback is configured", ErrNoNotifications)
		}
		n.opts.Fallback(title, body)
		return nil
	}
	content := objc.ID(objc.GetClass("UNMutableNotificationContent")).Send(objc.RegisterName("new"))
	content.Send(objc.RegisterName("setTitle:"), nsString(title))
	content.Send(objc.RegisterName("setBody:"), nsString(body))
	content.Send(objc.RegisterName("setCategoryIdentifier:"), nsString(notifyCategory))
	req := objc.ID(objc.GetClass("UNNotificationRequest")).Send(objc.RegisterName("requestWithIdentifier:content:trigger:"),
		nsString(key), content, objc.ID(0))
	log := n.opts.logger()
	center.Send(objc.RegisterName("addNotificationRequest:withCompletionHandler:"), req,
		objc.NewBlock(func(_ objc.Block, err objc.ID) {
			if err != 0 {
				log.Warn("notifications: the notification was not shown", "key", key,
					"err", goString(err.Send(objc.RegisterName("localizedDescription"))))
			}
		}))
	content.Send(objc.RegisterName("release"))
	return nil
}

// clicked runs the onClick of the notification shown under key.
func (n *Notifier) clicked(key string) {
	n.mu.Lock()
	f := n.clicks[key]
	n.mu.Unlock()
	if f != nil {
		go f()
	}
}

// Withdraw removes the notification shown under key, delivered or not
// yet; nothing when none is shown or outside a bundle (a fallback
// notification cannot be removed).
func (n *Notifier) Withdraw(key string) error {
	n.mu.Lock()
	_, shown := n.clicks[key]
	delete(n.clicks, key)
	center := n.center
	n.mu.Unlock()
	if !shown || center == 0 {
		return nil
	}
	arr := objc.ID(objc.GetClass("NSArray")).Send(objc.RegisterName("arrayWithObject:"), nsString(key))
	center.Send(objc.RegisterName("removeDeliveredNotificationsWithIdentifiers:"), arr)
	center.Send(objc.RegisterName("removePendingNotificationRequestsWithIdentifiers:"), arr)
	return nil
}

// Close stops delivering clicks to this Notifier.
func (n *Notifier) Close() error {
	notifierMu.Lock()
	if notifier == n {
		notifier = nil
	}
	notifierMu.Unlock()
	return nil
}
