package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
	"github.com/portcullis/portcullis/core/ids"
)

// InputOrigin says where the press behind a decision made in the approval
// window came from, as far as the system lets the app tell (docs/TRUST.md,
// "The approval window").
type InputOrigin string

const (
	// InputDevice: a press of a physical input device the display server
	// reported just before the decision (an XInput2 raw event of a slave
	// device other than the XTEST ones).
	InputDevice InputOrigin = "device"
	// InputSynthetic: the press was synthetic (an XTEST device's, or no
	// device press at all: an event sent with SendEvent).
	InputSynthetic InputOrigin = "synthetic"
	// InputUnknown: this system or build cannot tell (Wayland, no
	// XInput2, macOS): a window approval needs the operating system's
	// authentication.
	InputUnknown InputOrigin = "unknown"
)

// WindowInput is what the app knew of the press behind a window decision:
// its Origin, the name of the device it came from ("" when none), and, for
// a synthetic or unknown origin, why, in a clause a sentence can carry.
type WindowInput struct {
	Origin InputOrigin // device, synthetic or unknown; "" means unknown
	Device string      // the input device's name, "" when none was seen
	Reason string      // why the origin is synthetic or unknown, for the card
}

// Refusal kind of the decision_refused event of a window approval whose
// press was synthetic.
const refusedSyntheticInput = "synthetic_input"

// ErrSyntheticInput is what DecideInput returns for an approval whose
// press was synthetic: nothing was granted and the request stays pending.
var ErrSyntheticInput = errors.New("approval refused: synthetic input")

// DecideInput answers a pending request for the window, for a decision
// whose press in was judged as (WindowInput). A denial is Decide whatever
// the press: denying never needs a person. An approval from synthetic
// input is refused: a decision_refused event names the device, nothing is
// granted, the request stays pending, and the error (wrapping
// ErrSyntheticInput) is the sentence the card shows. An approval whose
// press cannot be told apart needs the operating system's authentication
// whatever settings.approvalAuthentication says (the mode in force then
// counts as always); where the system cannot authenticate, it is refused
// and the request stays pending. An approval from a device is Decide.
func (w *WindowApprovals) DecideInput(id ids.RequestID, dec authz.Decision, in WindowInput) error {
	if dec.Choice == authz.Deny || in.Origin == InputDevice {
		return w.decide(id, dec, false, in)
	}
	if in.Origin == InputSynthetic {
		d := w.d
		var req authz.Request
		for _, r := range d.authz.Pending() {
			if r.ID == id {
				req = r
			}
		}
		if req.ID == "" {
			return fmt.Errorf("%w: %s", authz.ErrNoRequest, id)
		}
		from := "no mouse or keyboard press reached the display server just before it (an event sent to the window)"
		if in.Device != "" {
			from = "it came from the input device " + quoteDevice(in.Device)
		}
		if in.Reason != "" {
			from += "; " + in.Reason
		}
		msg := fmt.Sprintf("approval refused: synthetic input (%s); nothing was granted and request %s is still waiting — click with your own mouse or keyboard, or run `portcullis approve %s` in your terminal", from, id, id)
		d.log.Warn("a window approval came from synthetic input", "request", id, "device", in.Device)
		exe, _ := os.Executable()
		d.appendAudit(audit.TypeDecisionRefused, audit.DecisionRefused{
			What: "approve approval request " + string(id) + " in the Portcullis window", Request: id, PID: os.Getpid(), Executable: exe,
			Refusal: refusedSyntheticInput, Reason: msg, ServerLabel: req.Card.ServerLabel, AgentRun: req.Card.AgentRun,
		})
		return syntheticInputError(msg)
	}
	return w.decide(id, dec, true, in)
}

// syntheticInputError is the sentence of a refusal for synthetic input;
// it is ErrSyntheticInput.
type syntheticInputError string

func (e syntheticInputError) Error() string        { return string(e) }
func (e syntheticInputError) Is(target error) bool { return target == ErrSyntheticInput }

// quoteDevice quotes a device name the display server reported (any
// client can name a device it creates).
func quoteDevice(name string) string {
	return fmt.Sprintf("%q", name)
}

// WindowAuthNote is what the approval window says on its cards when the
// press behind a decision cannot be told apart (in.Origin InputUnknown):
// approving asks the operating system to authenticate the person, or
// cannot be done in the window at all.
func (d *Daemon) WindowAuthNote(in WindowInput) string {
	if in.Origin != InputUnknown {
		return ""
	}
	st := d.authStatus()
	why := "This window cannot tell your clicks from synthetic input"
	if in.Reason != "" {
		why += " (" + in.Reason + ")"
	}
	if st.Available {
		return why + ": approving asks " + st.Mechanism + " to confirm it is you."
	}
	return why + " and the system cannot authenticate you: approve in your terminal with `portcullis approve`."
}

// decide is Decide, with the operating system's authentication required
// for an approval when force is set (the press could not be told apart);
// the decider's record names the input.
func (w *WindowApprovals) decide(id ids.RequestID, dec authz.Decision, force bool, in WindowInput) error {
	d := w.d
	var card authz.Card
	found := false
	for _, r := range d.authz.Pending() {
		if r.ID == id {
			card, found = r.Card, true
		}
	}
	st := d.authStatus()
	mode := st.Mode
	if force {
		mode = config.AuthAlways
	}
	if !found || !AuthenticationApplies(mode, audit.ChannelWindow, card, dec.Choice) {
		dec.Decider = d.windowDecider(osAuth{mode: st.Mode, by: audit.AuthNotAsked}, in)
		return d.authz.Decide(id, dec)
	}
	// The daemon's own process: no start time is needed to tell it
	// apart, since it cannot have exited while it asks.
	subject := AuthSubject{PID: os.Getpid(), UID: d.uid}
	if !st.Available {
		_, err := d.authenticateMode(context.Background(), id, dec.Choice, subject, audit.ChannelWindow, "the Portcullis window", mode, force)
		return err
	}
	go func() {
		auth, err := d.authenticateMode(context.Background(), id, dec.Choice, subject, audit.ChannelWindow, "the Portcullis window", mode, force)
		if err != nil {
			return
		}
		dec.Decider = d.windowDecider(auth, in)
		if err := d.authz.Decide(id, dec); err != nil {
			d.log.Info("approval decision not taken", "request", id, "err", err)
		}
	}()
	return nil
}

// EditConfigFromWindow is EditConfig for an edit made in the app's windows
// (Preferences), after a press judged as in. An edit that widens trust
// (config.SplitTrust against the configuration in force) takes the
// window's rule for approvals: from synthetic input it is refused (a
// decision_refused event of refusal synthetic_input names the device) and
// nothing is changed; where the press cannot be told apart it needs the
// operating system's authentication whatever
// settings.approvalAuthentication says. An edit that widens nothing is
// EditConfig.
func (d *Daemon) EditConfigFromWindow(by string, change func(*config.Config) error, in WindowInput) (*config.Config, error) {
	return d.editFromWindow(by, "", change, in)
}

// editFromWindow is EditConfigFromWindow for an edit made from the
// configuration whose digest is base ("": the one in force).
func (d *Daemon) editFromWindow(by, base string, change func(*config.Config) error, in WindowInput) (*config.Config, error) {
	st := d.authStatus() // before the edit takes the configuration's lock
	return d.editConfigGated(by, base, change, func(held []config.Widening) error {
		what := "save a change in Preferences that widens trust (" + held[0].Text + ")"
		switch in.Origin {
		case InputDevice:
			return nil
		case InputSynthetic:
			from := "no mouse or keyboard press reached the display server just before it"
			if in.Device != "" {
				from = "it came from the input device " + quoteDevice(in.Device)
			}
			msg := fmt.Sprintf("not saved: synthetic input (%s); nothing was changed — click Save with your own mouse or keyboard", from)
			d.log.Warn("a widening edit in the window came from synthetic input", "device", in.Device)
			exe, _ := os.Executable()
			d.appendAudit(audit.TypeDecisionRefused, audit.DecisionRefused{What: what, PID: os.Getpid(), Executable: exe, Refusal: refusedSyntheticInput, Reason: msg})
			return syntheticInputError(msg)
		}
		_, err := d.authenticateChangeMode(nil, os.Getpid(), what, held, config.AuthAlways, st)
		return err
	})
}
