package ui

import (
	"fmt"

	"fyne.io/fyne/v2"

	"github.com/portcullis/portcullis/core/authz"
)

// Notifier shows a desktop notification whose click runs onClick (on a
// goroutine of the notifier's; onClick must use fyne.Do for UI work). Package
// platform implements it: org.freedesktop.Notifications over D-Bus on Linux.
// Notify returns an error when the notification could not be shown; the
// tray logs it and the approval window opens anyway.
type Notifier interface {
	Notify(title, body string, onClick func()) error
}

// FyneNotifier is the Notifier of last resort: Fyne's SendNotification,
// which has a title and a body but no click action. onClick is never
// called.
type FyneNotifier struct{ App fyne.App }

var _ Notifier = FyneNotifier{}

// Notify sends title and body through Fyne. It never fails.
func (n FyneNotifier) Notify(title, body string, _ func()) error {
	n.App.SendNotification(fyne.NewNotification(title, body))
	return nil
}

// notificationText is the title and body of the notification sent when an
// approval request is raised.
func notificationText(r authz.Request) (title, body string) {
	c := r.Card
	title = "Portcullis: approval needed for " + c.ServerLabel
	body = c.Reason
	if c.Tool != "" {
		body = fmt.Sprintf("%s\nCall: %s", body, c.Tool)
	}
	return title, body + "\nClick to review."
}
