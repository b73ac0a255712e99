package platform

// The macOS notifications' identifiers and the choice of what a response
// does (notify_darwin.go); here so that they are tested on every system.

// notifyReview identifies the notification's Review action.
const notifyReview = "dev.portcullis.review"

// notifyAction is what a response to a notification does: the default
// action (a click on the notification) and the Review action open the
// card; dismissing it does nothing.
func notifyAction(actionIdentifier string) (open bool) {
	switch actionIdentifier {
	case "com.apple.UNNotificationDefaultActionIdentifier", notifyReview:
		return true
	}
	return false // com.apple.UNNotificationDismissActionIdentifier, or an action of someone else's
}
