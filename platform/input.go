package platform

import (
	"fmt"
	"strings"

	"github.com/portcullis/portcullis/core/daemon"
)

// InputCheck tells where the press behind a decision made in the approval
// window came from (docs/TRUST.md, "The approval window"): the window asks
// it when a person's click or key press has just activated an approve
// button, before the daemon is told.
type InputCheck interface {
	// Judge returns the origin of the press that activated the button
	// being handled now, in window (the display server's handle of the
	// window the button is in; 0 when the build cannot tell it). Each
	// device press answers for one decision, and only for the window it
	// went to: a press elsewhere on the screen does not answer for a
	// click the window received (one an agent sent with SendEvent while
	// the person clicked somewhere else). by is how the button was
	// activated, "button" (a click) or "key" (a key press); only a press
	// of that kind answers ("" when unknown: any).
	Judge(window uint64, by string) daemon.WindowInput
	// Unknown is the answer every Judge gives when this check can never
	// tell (an InputUnknown origin, with the reason), for the cards to
	// say so before any click; a zero WindowInput when it can.
	Unknown() daemon.WindowInput
	// Close releases the check's connection to the display server.
	Close() error
}

// RawPress is one raw input event the display server reported to every
// client that asked (XInput2's XI_RawButtonPress, XI_RawButtonRelease,
// XI_RawKeyPress on the root window), in the order it reported them.
type RawPress struct {
	// Serial numbers the events as the check received them (1, 2, …).
	Serial uint64
	// Time is the display server's timestamp (milliseconds, wrapping).
	Time uint32
	// Kind is "button press", "button release" or "key press".
	Kind string
	// Device is the name of the slave device that produced it.
	Device string
	// Target is the window the event went to, read when it arrived: for
	// a button, the deepest window under the pointer; for a key, the
	// window with the input focus. 0 when it could not be read.
	Target uint64
}

// Synthetic reports whether the event came from a device through which
// clients inject input: the XTEST slave devices the X server makes for
// each master device ("Virtual core XTEST pointer", "Virtual core XTEST
// keyboard", "<master> XTEST pointer" for a master a client adds).
func (p RawPress) Synthetic() bool {
	return strings.HasSuffix(p.Device, " XTEST pointer") || strings.HasSuffix(p.Device, " XTEST keyboard")
}

// PressWindow is how long before a decision (display-server milliseconds)
// the press that made it may have happened, and how far back synthetic
// input spoils it.
const PressWindow = 1500

// JudgePresses is the window's rule for one decision: events are the raw
// events received (oldest first), now the display server's time just
// after the decision (events up to then are all in events), used the
// serial of the last press that already answered for a decision.
//
// Any event of an XTEST device within PressWindow makes it synthetic,
// naming the device of the latest: a click an injected press surrounds is not the
// person's. Without such an event, the latest event of a device within
// PressWindow that has not answered for a decision yet (a button's press
// or release: a click's release activates a button; a key's press) makes
// it a device's, and it and every event before it are then used (the
// returned serial): one click answers for one decision. With none, it is
// synthetic without a device: the click reached the window without any
// device press (an event sent with SendEvent).
//
// With window set (the window whose button was activated), that latest
// device event must have gone to window: one that went to another window
// makes the decision synthetic too (the person clicked elsewhere and an
// event sent to the window rode on it), and nothing is used; one whose
// window could not be read makes it unknown (the operating system then
// authenticates the person).
//
// With by set ("button" or "key", how the button was activated), only a
// device event of that kind is the latest that counts: a key the person
// typed into the window, which took the focus as it appeared, never
// carries a click sent to it.
func JudgePresses(events []RawPress, now uint32, used uint64, window uint64, by string) (daemon.WindowInput, uint64) {
	var last, synthetic *RawPress
	// A button's release goes where its press went (the X server's
	// implicit grab), whatever window the pointer is over by then: the
	// pointer read at the release (Target) may have been moved onto the
	// approval window meanwhile (a drag, or an agent's XWarpPointer).
	pressedIn := map[string]uint64{}
	var lastTarget uint64
	for i := range events {
		e := &events[i]
		target := e.Target
		switch e.Kind {
		case "button press":
			pressedIn[e.Device] = e.Target
		case "button release":
			if t, ok := pressedIn[e.Device]; ok {
				target = t
			}
		}
		if age := now - e.Time; age > PressWindow { // wraps: a later event's age is huge, and it is ignored
			continue
		}
		if e.Synthetic() {
			synthetic = e
		} else if e.Serial > used && (by == "" || strings.HasPrefix(e.Kind, by+" ")) {
			last, lastTarget = e, target
		}
	}
	if e := synthetic; e != nil {
		return daemon.WindowInput{Origin: daemon.InputSynthetic, Device: e.Device,
			Reason: fmt.Sprintf("a %s of that device came %d ms before the decision", e.Kind, now-e.Time)}, used
	}
	if last == nil {
		return daemon.WindowInput{Origin: daemon.InputSynthetic}, used
	}
	switch {
	case window == 0 || lastTarget == window:
	case lastTarget == 0:
		return daemon.WindowInput{Origin: daemon.InputUnknown,
			Reason: fmt.Sprintf("the window the last %s of %s went to could not be read", last.Kind, last.Device)}, used
	default:
		return daemon.WindowInput{Origin: daemon.InputSynthetic,
			Reason: fmt.Sprintf("the last %s of a device (%s), %d ms before, went to another window", last.Kind, last.Device, now-last.Time)}, used
	}
	return daemon.WindowInput{Origin: daemon.InputDevice, Device: last.Device}, last.Serial
}

// unknownInput is an InputCheck of a system or build that cannot tell:
// every approval in the window needs the operating system's
// authentication.
type unknownInput struct{ reason string }

func (u unknownInput) Judge(uint64, string) daemon.WindowInput {
	return daemon.WindowInput{Origin: daemon.InputUnknown, Reason: u.reason}
}

func (u unknownInput) Unknown() daemon.WindowInput { return u.Judge(0, "") }

func (unknownInput) Close() error { return nil }
