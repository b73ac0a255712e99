package platform

import "testing"

// TestNotifyAction: a click on an approval notification, or on its Review
// action, opens the card; dismissing it, or an action Portcullis did not
// define, does not.
func TestNotifyAction(t *testing.T) {
	for action, open := range map[string]bool{
		"com.apple.UNNotificationDefaultActionIdentifier": true,
		notifyReview: true,
		"com.apple.UNNotificationDismissActionIdentifier": false,
		"":                       false,
		"dev.portcullis.approve": false, // no notification action approves: only the card does
	} {
		if got := notifyAction(action); got != open {
			t.Errorf("notifyAction(%q) = %v, want %v", action, got, open)
		}
	}
}
