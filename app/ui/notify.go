package ui

import (
	"fmt"
	"strings"
	"time"

	"fyne.io/fyne/v2"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/textsafe"
)

// Notifier shows desktop notifications, each under a key (an approval
// request's ID), whose click runs onClick (on a goroutine of the
// notifier's; onClick must use fyne.Do for UI work), and withdraws them
// when what they announce is over. Package platform implements it:
// org.freedesktop.Notifications over D-Bus on Linux (CloseNotification),
// the Notification Center on macOS. Notify returns an error when the
// notification could not be shown; the tray logs it and the approval
// window opens anyway.
type Notifier interface {
	Notify(key, title, body string, onClick func()) error
	// Withdraw removes the notification shown under key, if any.
	Withdraw(key string) error
}

// FyneNotifier is the Notifier of last resort: Fyne's SendNotification,
// which has a title and a body but no click action and cannot be
// withdrawn. onClick is never called.
type FyneNotifier struct{ App fyne.App }

var _ Notifier = FyneNotifier{}

// Notify sends title and body through Fyne. It never fails.
func (n FyneNotifier) Notify(_, title, body string, _ func()) error {
	n.App.SendNotification(fyne.NewNotification(title, body))
	return nil
}

// Withdraw does nothing: Fyne's notifications cannot be removed.
func (FyneNotifier) Withdraw(string) error { return nil }

// notificationText is the title and body of the notification sent when an
// approval request is raised: the card's sentence.
func notificationText(r authz.Request) (title, body string) {
	return "Portcullis: approval needed", sentence(r.Card) + "\nClick to review."
}

// missedKey is the notification key of a missed approval.
func missedKey(id string) string { return "missed:" + id }

// decided is a request no longer pending, as the tray remembers it: the
// recent decisions of its menu, the answer to a click on a notification
// that outlived its request.
type decided struct {
	ID, Server, Tool string
	Outcome          string // "approved for this run", "approved once", "denied", "withdrawn", "not answered in time, so denied"…
	By               string // "in the approval window", "from the command line", ""
	Why              string // a withdrawal's reason
	At               time.Time
	Missed           bool // nobody answered in time
}

// decidedOf reads a resolved request's event, at the time it arrived.
func decidedOf(ev authz.Event, at time.Time) decided {
	r := ev.Request
	d := decided{ID: string(r.ID), Server: r.Card.ServerLabel, Tool: r.Card.Tool, At: at}
	var choice authz.Choice
	if ev.Decision != nil {
		choice = ev.Decision.Choice
	}
	switch by := r.DecidedBy; {
	case by == "timeout":
		d.Outcome, d.Missed = "not answered in time, so denied", true
	case strings.HasPrefix(by, "withdrawn"):
		d.Outcome, d.Why = "withdrawn", strings.TrimPrefix(strings.TrimPrefix(by, "withdrawn"), ": ")
	case strings.HasPrefix(by, "audit_unavailable"):
		d.Outcome = "denied: the audit log could not record the approval"
	default:
		switch choice {
		case authz.ApproveRun:
			d.Outcome = "approved for this run"
		case authz.ApproveOnce:
			d.Outcome = "approved once"
		default:
			d.Outcome = "denied"
		}
		switch by {
		case "app":
			d.By = "in the approval window"
		case "cli":
			d.By = "from the command line"
		case "":
		default:
			d.By = "by " + by
		}
	}
	return d
}

// what names the request: "`notes_write` on notes", or the launch of a
// server.
func (d decided) what() string {
	if d.Tool != "" {
		return fmt.Sprintf("`%s` on %s", textsafe.Line(d.Tool), textsafe.Line(d.Server))
	}
	return "the launch of " + textsafe.Line(d.Server)
}

// menuLine is d in the tray menu's recent decisions.
func (d decided) menuLine() string {
	return fmt.Sprintf("%s  %s — %s", d.At.Local().Format("15:04"), d.what(), d.Outcome)
}

// outcomeText says what became of the request d, for a click on its
// notification after the fact: "approved for this run at 19:04 in the
// approval window".
func (d decided) outcomeText() string {
	s := fmt.Sprintf("The approval request for %s was %s at %s", d.what(), d.Outcome, d.At.Local().Format("15:04"))
	if d.By != "" {
		s += " " + d.By
	}
	if d.Why != "" {
		s += " (" + textsafe.Line(d.Why) + ")"
	}
	s += "."
	if d.Missed {
		s += " Nothing was granted; the agent got approval_timeout and may call again, which asks again."
	}
	return s
}

// missedText is the notification of a request nobody answered in time.
func missedText(d decided) (title, body string) {
	return "Portcullis: missed approval", fmt.Sprintf("Nobody answered the request for %s in time: it was denied at %s. "+
		"The menu's recent decisions keep it.", d.what(), d.At.Local().Format("15:04"))
}
