package platform

import (
	"strings"
	"testing"

	"github.com/portcullis/portcullis/core/daemon"
)

// TestJudgePresses is the window's rule: a device's click answers for one
// decision; an XTEST event near the decision, or no device event at all
// (SendEvent), never approves; old events do not count.
func TestJudgePresses(t *testing.T) {
	const mouse, xtest = "Logitech USB Optical Mouse", "Virtual core XTEST pointer"
	click := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: mouse},
		{Serial: 2, Time: 10_080, Kind: "button release", Device: mouse},
	}
	v, used := JudgePresses(click, 10_100, 0, 0, "")
	if v.Origin != daemon.InputDevice || v.Device != mouse || used != 2 {
		t.Errorf("a mouse click: %+v used %d, want the device, both events used", v, used)
	}
	// The same click cannot answer for a second decision (a SendEvent
	// click on the next card right after).
	if v, _ := JudgePresses(click, 10_300, used, 0, ""); v.Origin != daemon.InputSynthetic || v.Device != "" {
		t.Errorf("the same click again: %+v, want synthetic without a device", v)
	}
	// An injected click the agent timed right after the person's.
	injected := append(click[:2:2],
		RawPress{Serial: 3, Time: 10_090, Kind: "button press", Device: xtest},
		RawPress{Serial: 4, Time: 10_095, Kind: "button release", Device: xtest})
	if v, u := JudgePresses(injected, 10_100, 0, 0, ""); v.Origin != daemon.InputSynthetic || v.Device != xtest || u != 0 {
		t.Errorf("an XTEST click after the person's: %+v used %d, want synthetic from %s, nothing used", v, u, xtest)
	}
	// A person's click just after an injected one is still spoilt by it.
	after := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: "Virtual core XTEST keyboard"},
		{Serial: 2, Time: 10_500, Kind: "button press", Device: mouse},
	}
	if v, _ := JudgePresses(after, 10_600, 0, 0, ""); v.Origin != daemon.InputSynthetic || v.Device != "Virtual core XTEST keyboard" {
		t.Errorf("XTEST input 600 ms before: %+v, want synthetic", v)
	}
	// An XTEST device of a master a client added.
	if !(RawPress{Device: "evil XTEST pointer"}).Synthetic() || (RawPress{Device: "XTEST pointer lookalike"}).Synthetic() {
		t.Error("XTEST device names are the X server's suffixes")
	}
	// Old events: neither the person's press nor an old injection counts.
	old := []RawPress{{Serial: 1, Time: 500, Kind: "button press", Device: xtest}, {Serial: 2, Time: 2_000, Kind: "key press", Device: "AT keyboard"}}
	if v, _ := JudgePresses(old, 2_000+PressWindow+1, 0, 0, ""); v.Origin != daemon.InputSynthetic || v.Device != "" {
		t.Errorf("presses older than the window: %+v, want synthetic without a device", v)
	}
	if v, _ := JudgePresses(old, 2_100, 0, 0, ""); v.Origin != daemon.InputDevice || v.Device != "AT keyboard" {
		t.Errorf("a key press 100 ms before, the XTEST one 1.6 s before: %+v", v)
	}
	// The server's clock wraps: an event just before the wrap is recent.
	wrap := []RawPress{{Serial: 1, Time: ^uint32(0) - 50, Kind: "key press", Device: "AT keyboard"}}
	if v, _ := JudgePresses(wrap, 100, 0, 0, ""); v.Origin != daemon.InputDevice {
		t.Errorf("a press 151 ms before across the wrap: %+v", v)
	}
	// SendEvent: no raw event at all.
	if v, _ := JudgePresses(nil, 5_000, 0, 0, ""); v.Origin != daemon.InputSynthetic || v.Device != "" {
		t.Errorf("no raw event: %+v", v)
	}
}

// TestJudgePressesOnAnotherWindow: a device's press counts only for the
// window it went to. The agent waits for the person to click in another
// window (its terminal) and sends a click to the approval window with
// SendEvent at once: the device press is recent, but it went elsewhere,
// so the decision is synthetic and the press is not used up; the
// person's own click on the window approves. A press whose window could
// not be read leaves it to the operating system (unknown).
func TestJudgePressesOnAnotherWindow(t *testing.T) {
	const mouse, approval, terminal = "Logitech USB Optical Mouse", 0x2a00007, 0x1c00003
	elsewhere := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: mouse, Target: terminal},
		{Serial: 2, Time: 10_080, Kind: "button release", Device: mouse, Target: terminal},
	}
	v, used := JudgePresses(elsewhere, 10_100, 0, approval, "")
	if v.Origin != daemon.InputSynthetic || used != 0 || !strings.Contains(v.Reason, "went to another window") {
		t.Errorf("a click in another window, then an event sent to the approval window: %+v used %d, want synthetic, nothing used", v, used)
	}
	if v, _ := JudgePresses(elsewhere, 10_100, 0, 0, ""); v.Origin != daemon.InputDevice {
		t.Errorf("the same with the window unknown (no handle in this build): %+v, want the device's", v)
	}
	here := append(elsewhere[:2:2],
		RawPress{Serial: 3, Time: 10_400, Kind: "button press", Device: mouse, Target: approval},
		RawPress{Serial: 4, Time: 10_480, Kind: "button release", Device: mouse, Target: approval})
	if v, used := JudgePresses(here, 10_500, 0, approval, ""); v.Origin != daemon.InputDevice || v.Device != mouse || used != 4 {
		t.Errorf("the person's click on the approval window: %+v used %d, want the device's, all used", v, used)
	}
	unread := []RawPress{{Serial: 1, Time: 10_000, Kind: "key press", Device: "AT keyboard"}}
	if v, _ := JudgePresses(unread, 10_100, 0, approval, ""); v.Origin != daemon.InputUnknown {
		t.Errorf("a key press whose window could not be read: %+v, want unknown", v)
	}
}

// TestJudgePressesReleaseGoesWherePressWent: a button's release goes to
// the window its press went to (the implicit grab), wherever the pointer
// is when it is read. The person presses in their terminal; the agent,
// which sees raw events too, warps the pointer onto the approval window
// before the release and sends a click there: the release read over the
// approval window must not answer for it.
func TestJudgePressesReleaseGoesWherePressWent(t *testing.T) {
	const mouse, approval, terminal = "Logitech USB Optical Mouse", 0x2a00007, 0x1c00003
	warped := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: mouse, Target: terminal},
		{Serial: 2, Time: 10_080, Kind: "button release", Device: mouse, Target: approval},
	}
	if v, used := JudgePresses(warped, 10_100, 0, approval, ""); v.Origin != daemon.InputSynthetic || used != 0 {
		t.Errorf("a press in the terminal, its release read over the approval window: %+v used %d, want synthetic, nothing used", v, used)
	}
	// Pressed on the approval window and released a little off it: the
	// click was the window's (a button activates on release inside it,
	// which the toolkit decides; the press went there).
	onWindow := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: mouse, Target: approval},
		{Serial: 2, Time: 10_080, Kind: "button release", Device: mouse, Target: terminal},
	}
	if v, used := JudgePresses(onWindow, 10_100, 0, approval, ""); v.Origin != daemon.InputDevice || used != 2 {
		t.Errorf("a press on the approval window released off it: %+v used %d, want the device's, both used", v, used)
	}
	// A release whose press came before the events kept (or was not
	// seen) keeps the window read at the release.
	lone := []RawPress{{Serial: 7, Time: 10_080, Kind: "button release", Device: mouse, Target: approval}}
	if v, _ := JudgePresses(lone, 10_100, 0, approval, ""); v.Origin != daemon.InputDevice {
		t.Errorf("a release alone over the approval window: %+v, want the device's", v)
	}
}

// TestJudgePressesOfTheActivatingKind: the card took the focus as it
// appeared, and the person, typing in their terminal, typed a key into it;
// an agent sends a click to Approve at once. The key went to the approval
// window, but a click activated the button: only a button event counts,
// so the decision is synthetic. A key that activates the focused button
// is answered by the key press.
func TestJudgePressesOfTheActivatingKind(t *testing.T) {
	const keyboard, mouse, approval = "AT Translated Set 2 keyboard", "Logitech USB Optical Mouse", 0x2a00007
	typed := []RawPress{{Serial: 1, Time: 10_000, Kind: "key press", Device: keyboard, Target: approval}}
	if v, used := JudgePresses(typed, 10_100, 0, approval, "button"); v.Origin != daemon.InputSynthetic || used != 0 {
		t.Errorf("a key typed into the window, then a click sent to Approve: %+v used %d, want synthetic, nothing used", v, used)
	}
	if v, used := JudgePresses(typed, 10_100, 0, approval, "key"); v.Origin != daemon.InputDevice || v.Device != keyboard || used != 1 {
		t.Errorf("Space on the focused button: %+v used %d, want the keyboard's", v, used)
	}
	clicked := []RawPress{
		{Serial: 1, Time: 10_000, Kind: "button press", Device: mouse, Target: approval},
		{Serial: 2, Time: 10_050, Kind: "button release", Device: mouse, Target: approval},
	}
	if v, _ := JudgePresses(clicked, 10_100, 0, approval, "key"); v.Origin != daemon.InputSynthetic {
		t.Errorf("a click on the window, then a key sent to the focused button: %+v, want synthetic", v)
	}
	if v, _ := JudgePresses(clicked, 10_100, 0, approval, "button"); v.Origin != daemon.InputDevice || v.Device != mouse {
		t.Errorf("the person's click: %+v, want the mouse's", v)
	}
}
