//go:build !linux && !darwin

package platform

import (
	"fmt"
	"runtime"
)

// Notifier is the notifier of systems Portcullis has no notifications for:
// every Notify fails with ErrNoNotifications naming runtime.GOOS.
type Notifier struct{}

// NewNotifier returns the Notifier of this system.
func NewNotifier(NotifierOptions) *Notifier { return &Notifier{} }

// Notify fails with ErrNoNotifications.
func (*Notifier) Notify(key, title, body string, onClick func()) error {
	return fmt.Errorf("%w: Portcullis has no notifications for %s", ErrNoNotifications, runtime.GOOS)
}

// Withdraw does nothing: no notification was shown.
func (*Notifier) Withdraw(key string) error { return nil }

// Close does nothing.
func (*Notifier) Close() error { return nil }
