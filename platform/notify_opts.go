package platform

import (
	"errors"
	"log/slog"
)

// ErrNoNotifications is wrapped by the errors of Notifier.Notify when this
// system, or this session, has no way to show a notification.
var ErrNoNotifications = errors.New("desktop notifications are unavailable")

// NotifierOptions configure a Notifier.
type NotifierOptions struct {
	// AppName is the application name the notification server shows
	// (default "Portcullis").
	AppName string
	// Address is the D-Bus address of the session bus on Linux ("":
	// DBUS_SESSION_BUS_ADDRESS). Tests point it at a private bus.
	Address string
	// Fallback shows a notification that cannot be clicked. macOS uses it
	// (Fyne's SendNotification); Linux ignores it.
	Fallback func(title, body string)
	Logger   *slog.Logger
}

func (o NotifierOptions) logger() *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Logger
}
