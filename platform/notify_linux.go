//go:build linux

package platform

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/godbus/dbus/v5"
)

// The Desktop Notifications Specification 1.2 names (freedesktop.org):
// the service, its object and interface, and the action key invoked when
// the notification itself is clicked.
const (
	notifyName      = "org.freedesktop.Notifications"
	notifyPath      = dbus.ObjectPath("/org/freedesktop/Notifications")
	notifyIface     = "org.freedesktop.Notifications"
	notifyDefault   = "default"
	notifyReviewKey = "review"
)

// Notifier shows desktop notifications through org.freedesktop.Notifications
// on the D-Bus session bus (Desktop Notifications Specification 1.2). A
// notification with a click handler carries the "default" action (the
// server invokes it when the notification is clicked) and a "Review" button;
// either runs the handler once, on the Notifier's signal goroutine, when the
// ActionInvoked signal comes from the bus name that owned the service when
// the notification was sent. The bus is dialled on first use. Safe for
// concurrent use.
type Notifier struct {
	opts NotifierOptions
	log  *slog.Logger

	mu     sync.Mutex
	conn   *dbus.Conn        // guarded by mu; nil until the first Notify
	clicks map[uint32]click  // guarded by mu; id of a notification shown → its server and click handler
	shown  map[string]uint32 // guarded by mu; key → id of the notification shown under it
}

type click struct {
	owner string // unique bus name of the notification server
	fn    func()
}

// NewNotifier returns the Notifier of this system.
func NewNotifier(o NotifierOptions) *Notifier {
	return &Notifier{opts: o, log: o.logger(), clicks: map[uint32]click{}, shown: map[string]uint32{}}
}

// connectLocked dials the session bus and starts listening for the
// notification server's signals.
func (n *Notifier) connectLocked() (*dbus.Conn, error) {
	if n.conn != nil {
		return n.conn, nil
	}
	var conn *dbus.Conn
	var err error
	if n.opts.Address != "" {
		conn, err = dbus.Connect(n.opts.Address)
	} else {
		conn, err = dbus.ConnectSessionBus()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: connecting to the D-Bus session bus: %v", ErrNoNotifications, err)
	}
	if err := conn.AddMatchSignal(dbus.WithMatchObjectPath(notifyPath), dbus.WithMatchInterface(notifyIface)); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: subscribing to %s signals: %v", ErrNoNotifications, notifyIface, err)
	}
	ch := make(chan *dbus.Signal, 32)
	conn.Signal(ch)
	go n.listen(ch)
	n.conn = conn
	return conn, nil
}

// Notify shows title and body under key (one notification per key: a
// second one with the same key replaces the first); clicking the
// notification (or its Review button) runs onClick once. Errors wrap
// ErrNoNotifications when no session bus or no notification server is
// there.
func (n *Notifier) Notify(key, title, body string, onClick func()) error {
	n.mu.Lock()
	conn, err := n.connectLocked()
	replaces := n.shown[key]
	n.mu.Unlock()
	if err != nil {
		return err
	}
	var owner string
	if err := conn.BusObject().Call("org.freedesktop.DBus.GetNameOwner", 0, notifyName).Store(&owner); err != nil {
		return fmt.Errorf("%w: no notification server owns %s on the session bus: %v", ErrNoNotifications, notifyName, err)
	}
	actions := []string{}
	if onClick != nil {
		actions = []string{notifyDefault, "Review", notifyReviewKey, "Review"}
	}
	hints := map[string]dbus.Variant{
		"urgency":       dbus.MakeVariant(byte(1)), // normal
		"desktop-entry": dbus.MakeVariant("dev.portcullis.app"),
	}
	var id uint32
	call := conn.Object(notifyName, notifyPath).Call(notifyIface+".Notify", 0,
		n.opts.appName(), replaces, "dialog-question", title, body, actions, hints, int32(-1))
	if err := call.Store(&id); err != nil {
		return fmt.Errorf("sending a notification to %s: %w", notifyName, err)
	}
	n.mu.Lock()
	delete(n.clicks, replaces)
	n.shown[key] = id
	n.clicks[id] = click{owner: owner, fn: onClick} // fn nil: not clickable, but its closing is heard

	n.mu.Unlock()
	n.log.Debug("notification sent", "id", id, "server", owner)
	return nil
}

// Withdraw closes the notification shown under key
// (org.freedesktop.Notifications.CloseNotification) and forgets its click
// handler: what it announced is over. A key with no notification shown, or
// one the server closed already, is no error.
func (n *Notifier) Withdraw(key string) error {
	n.mu.Lock()
	id, ok := n.shown[key]
	delete(n.shown, key)
	delete(n.clicks, id)
	conn := n.conn
	n.mu.Unlock()
	if !ok || conn == nil {
		return nil
	}
	if err := conn.Object(notifyName, notifyPath).Call(notifyIface+".CloseNotification", 0, id).Err; err != nil {
		return fmt.Errorf("withdrawing notification %d from %s: %w", id, notifyName, err)
	}
	n.log.Debug("notification withdrawn", "id", id, "key", key)
	return nil
}

// forgetLocked drops the key a notification was shown under.
func (n *Notifier) forgetLocked(id uint32) {
	for k, v := range n.shown {
		if v == id {
			delete(n.shown, k)
		}
	}
}

// listen handles ActionInvoked and NotificationClosed until the connection
// closes.
func (n *Notifier) listen(ch <-chan *dbus.Signal) {
	for sig := range ch {
		if sig.Path != notifyPath || len(sig.Body) < 2 {
			continue
		}
		id, ok := sig.Body[0].(uint32)
		if !ok {
			continue
		}
		switch sig.Name {
		case notifyIface + ".ActionInvoked":
			action, _ := sig.Body[1].(string)
			if action != notifyDefault && action != notifyReviewKey {
				continue
			}
			n.mu.Lock()
			c, ok := n.clicks[id]
			if ok && c.owner == sig.Sender {
				delete(n.clicks, id)
				n.forgetLocked(id)
			}
			n.mu.Unlock()
			if !ok || c.owner != sig.Sender || c.fn == nil {
				n.log.Debug("notification action ignored", "id", id, "sender", sig.Sender)
				continue
			}
			c.fn()
		case notifyIface + ".NotificationClosed":
			n.mu.Lock()
			if c, ok := n.clicks[id]; ok && c.owner == sig.Sender {
				delete(n.clicks, id)
				n.forgetLocked(id)
			}
			n.mu.Unlock()
		}
	}
}

// Close disconnects from the bus; pending click handlers are dropped.
func (n *Notifier) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.conn == nil {
		return nil
	}
	err := n.conn.Close()
	n.conn = nil
	n.clicks = map[uint32]click{}
	n.shown = map[string]uint32{}
	return err
}

// appName is the application name the notification server shows.
func (o NotifierOptions) appName() string {
	if o.AppName == "" {
		return "Portcullis"
	}
	return o.AppName
}
