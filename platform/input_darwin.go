//go:build darwin

package platform

// NewInputCheck returns the InputCheck of macOS: any app the person
// allowed under Privacy & Security › Accessibility can post mouse and
// keyboard events (CGEventPost) that reach the window as the person's
// would, and the window does not check an event's source (docs/TRUST.md),
// so every answer is unknown: window approvals need LocalAuthentication.
func NewInputCheck() InputCheck {
	return unknownInput{reason: "macOS: an app allowed under Accessibility can post clicks the window cannot tell from yours"}
}
