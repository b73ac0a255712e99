package daemon

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/config"
)

// openTestAudit gives d an audit log in its data directory.
func openTestAudit(t *testing.T, d *Daemon) {
	t.Helper()
	al, err := audit.Open(d.auditOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	d.audit, d.auditW = al, &recovering{log: al, retryEvery: time.Second}
}

// lastEvent decodes the latest audit event of type typ into v; false when
// there is none.
func lastEvent(t *testing.T, d *Daemon, typ string, v any) bool {
	t.Helper()
	evs, err := audit.Tail(AuditDir(d.opts.Dirs), 20)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs {
		if e.Type == typ {
			if err := e.DecodeFields(v); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	return found
}

// TestWindowApprovalFromSyntheticInput: an approval in the window whose
// press was synthetic (an XTEST device, or no device press) grants
// nothing, under every mode and with the OS authentication available: the
// request stays pending, a decision_refused event names the device, and
// the answer says what happened and what the person can do. A denial
// from the same input goes ahead (denying never needs a person).
func TestWindowApprovalFromSyntheticInput(t *testing.T) {
	card := authz.Card{ServerLabel: "srv", AgentRun: "run1", Tool: "read", ToolScope: []string{"read"}, CurrentEpoch: "01EP"}
	for _, mode := range []string{config.AuthOff, config.AuthCredentials, config.AuthAlways} {
		t.Run(mode, func(t *testing.T) {
			fa := &fakeAuth{}
			d := authDaemon(t, mode, fa)
			openTestAudit(t, d)
			id := d.authz.Raise(card)
			in := WindowInput{Origin: InputSynthetic, Device: "Virtual core XTEST pointer", Reason: "a button press of that device came 3 ms before the decision"}
			err := d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read"}, By: "app"}, in)
			if !errors.Is(err, ErrSyntheticInput) {
				t.Fatalf("DecideInput = %v, want ErrSyntheticInput", err)
			}
			for _, w := range []string{"approval refused: synthetic input", `"Virtual core XTEST pointer"`, string(id + " is still waiting"), string("portcullis approve " + id)} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q lacks %q", err, w)
				}
			}
			if len(d.authz.Pending()) != 1 || len(fa.asked) != 0 {
				t.Errorf("%d pending, OS asked %d times; want the request pending, nothing asked", len(d.authz.Pending()), len(fa.asked))
			}
			var r audit.DecisionRefused
			if !lastEvent(t, d, audit.TypeDecisionRefused, &r) || r.Refusal != refusedSyntheticInput || r.Request != id ||
				!strings.Contains(r.Reason, "Virtual core XTEST pointer") || r.PID != os.Getpid() || r.ServerLabel != "srv" {
				t.Errorf("decision_refused %+v", r)
			}
			// SendEvent: no device press at all.
			err = d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.ApproveOnce, By: "app"}, WindowInput{Origin: InputSynthetic})
			if !errors.Is(err, ErrSyntheticInput) || !strings.Contains(err.Error(), "no mouse or keyboard press") || len(d.authz.Pending()) != 1 {
				t.Errorf("DecideInput without a device press = %v, %d pending", err, len(d.authz.Pending()))
			}
			if err := d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.Deny, By: "app"}, in); err != nil {
				t.Fatalf("deny from synthetic input: %v", err)
			}
			if g, err := d.authz.Wait(context.Background(), id); g != nil || !errors.Is(err, authz.ErrDenied) {
				t.Errorf("Wait = %v, %v; want a denial", g, err)
			}
		})
	}
}

// TestWindowApprovalFromUnknownInput: where the window cannot tell (Wayland,
// macOS), an approval needs the OS authentication even under "off"; without
// a mechanism it is refused and the request stays pending. From a device's
// press, "off" approves without asking and the record names the device.
func TestWindowApprovalFromUnknownInput(t *testing.T) {
	card := authz.Card{ServerLabel: "srv", AgentRun: "run1", Tool: "read", ToolScope: []string{"read"}, CurrentEpoch: "01EP"}
	unknown := WindowInput{Origin: InputUnknown, Reason: "a Wayland session"}
	t.Run("authenticated", func(t *testing.T) {
		ba := &blockingAuth{asked: make(chan AuthSubject, 1), answer: make(chan error, 1)}
		d := authDaemon(t, config.AuthOff, ba)
		openTestAudit(t, d)
		id := d.authz.Raise(card)
		if err := d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read"}, By: "app"}, unknown); err != nil {
			t.Fatal(err)
		}
		<-ba.asked
		ba.answer <- nil
		if g, err := d.authz.Wait(context.Background(), id); err != nil || g == nil {
			t.Fatalf("Wait = %v, %v; want a grant", g, err)
		}
		var g audit.ApprovalGranted
		if !lastEvent(t, d, audit.TypeApprovalGranted, &g) || g.Authentication != "blockingauth" || g.Input != string(InputUnknown) {
			t.Errorf("approval_granted %+v; want the OS authentication and the unknown input named", g)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		d := authDaemon(t, config.AuthOff, &fakeAuth{avail: errors.New("no polkitd")})
		openTestAudit(t, d)
		id := d.authz.Raise(card)
		err := d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read"}, By: "app"}, unknown)
		if err == nil || !strings.Contains(err.Error(), "cannot tell your click from synthetic input") || !strings.Contains(err.Error(), "portcullis approve "+string(id)) || len(d.authz.Pending()) != 1 {
			t.Fatalf("DecideInput = %v with %d pending; want a refusal and the request pending", err, len(d.authz.Pending()))
		}
		if note := d.WindowAuthNote(unknown); !strings.Contains(note, "a Wayland session") || !strings.Contains(note, "portcullis approve") {
			t.Errorf("the card's note %q", note)
		}
	})
	t.Run("device", func(t *testing.T) {
		fa := &fakeAuth{}
		d := authDaemon(t, config.AuthOff, fa)
		openTestAudit(t, d)
		id := d.authz.Raise(card)
		in := WindowInput{Origin: InputDevice, Device: "Logitech USB Optical Mouse"}
		if err := d.WindowApprovals().DecideInput(id, authz.Decision{Choice: authz.ApproveRun, Tools: []string{"read"}, By: "app"}, in); err != nil {
			t.Fatal(err)
		}
		var g audit.ApprovalGranted
		if !lastEvent(t, d, audit.TypeApprovalGranted, &g) || g.Input != "device" || g.InputDevice != in.Device || len(fa.asked) != 0 {
			t.Errorf("approval_granted %+v (asked %d); want the device named, no authentication", g, len(fa.asked))
		}
		if d.WindowAuthNote(in) != "" {
			t.Error("a card note for a device's press")
		}
	})
}

// TestWindowEditFromSyntheticInput: a Preferences edit that widens trust
// (a tool to allow) from synthetic input changes nothing and is recorded
// as refused; from a press the window cannot tell apart it needs the OS
// authentication, which this daemon has not; from a device it is made. An
// edit that narrows goes ahead whatever the press.
func TestWindowEditFromSyntheticInput(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "approve", "write": "approve"})
	openTestAudit(t, d)
	pol := rechecked(d, "srv")
	allowRead := func(c *config.Config) error {
		c.Servers["srv"].Tools["read"] = config.ToolPolicy{Policy: config.PolicyAllow}
		return nil
	}
	xtest := WindowInput{Origin: InputSynthetic, Device: "Virtual core XTEST pointer"}
	if _, err := d.EditConfigFromWindow("app (Preferences)", allowRead, xtest); !errors.Is(err, ErrSyntheticInput) || !strings.Contains(err.Error(), "nothing was changed") {
		t.Fatalf("widening edit from XTEST: %v, want ErrSyntheticInput", err)
	}
	if got := pol("read"); got != config.PolicyApprove {
		t.Errorf("read %s after a refused edit, want approve", got)
	}
	var r audit.DecisionRefused
	if !lastEvent(t, d, audit.TypeDecisionRefused, &r) || r.Refusal != refusedSyntheticInput || !strings.Contains(r.What, "srv: tool read approve → allow") || !strings.Contains(r.Reason, "Virtual core XTEST pointer") {
		t.Errorf("decision_refused %+v", r)
	}
	if _, err := d.EditConfigFromWindow("app (Preferences)", allowRead, WindowInput{Origin: InputUnknown}); err == nil || !strings.Contains(err.Error(), "cannot tell your click") {
		t.Errorf("widening edit from an unknown press without OS authentication: %v, want a refusal", err)
	}
	if got := pol("read"); got != config.PolicyApprove {
		t.Errorf("read %s, want approve", got)
	}
	denyWrite := func(c *config.Config) error {
		c.Servers["srv"].Tools["write"] = config.ToolPolicy{Policy: config.PolicyDeny}
		return nil
	}
	if _, err := d.EditConfigFromWindow("app (Preferences)", denyWrite, xtest); err != nil {
		t.Errorf("narrowing edit from XTEST: %v, want it made", err)
	}
	if _, err := d.EditConfigFromWindow("app (Preferences)", allowRead, WindowInput{Origin: InputDevice, Device: "AT keyboard"}); err != nil {
		t.Fatal(err)
	}
	if got := pol("read"); got != config.PolicyAllow {
		t.Errorf("read %s after the device's edit, want allow", got)
	}
}
