package daemon

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/portcullis/portcullis/core/config"
)

// TestOutsideEditHeld: an edit of the file that allows one tool and denies
// another has the deny in force at once and the allow held; the last good
// copy is what is in force; rejecting writes what is in force back to the
// file, which then widens nothing. An edit by the person's tools
// (EditConfig) is in force at once, and refused while a change waits.
func TestOutsideEditHeld(t *testing.T) {
	d := newTestDaemon(t, map[string]string{"read": "approve", "write": "approve"})
	path := d.opts.Dirs.ConfigFile()
	pol := rechecked(d, "srv")

	savePolicies(t, path, map[string]string{"read": "allow", "write": "deny"})
	if got := pol("write"); got != config.PolicyDeny {
		t.Errorf("write %s, want deny at once (it narrows)", got)
	}
	if got := pol("read"); got != config.PolicyApprove {
		t.Errorf("read %s, want approve until the allow is confirmed", got)
	}
	p := d.PendingChange()
	if p == nil || len(p.Held) != 1 || p.Held[0].Text != "srv: tool read approve → allow" {
		t.Fatalf("pending %+v, want the allow of read held", p)
	}
	inForce, err := os.ReadFile(path + config.LastGoodSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := config.Parse(inForce, "last-good"); err != nil || c.Servers["srv"].Policy("read") != config.PolicyApprove || c.Servers["srv"].Policy("write") != config.PolicyDeny {
		t.Errorf("last-good copy is not what is in force (%v):\n%s", err, inForce)
	}

	// The person's tools cannot bury the change.
	_, err = d.EditConfig("test", func(c *config.Config) error { return nil })
	if !errors.Is(err, ErrChangePending) {
		t.Errorf("EditConfig while a change waits: %v, want ErrChangePending", err)
	}
	if err := d.DecideChange("chg-000000000000", true, "test"); !errors.Is(err, ErrNoChange) {
		t.Errorf("DecideChange of another id: %v, want ErrNoChange", err)
	}

	if err := d.DecideChange(p.ID, false, "test"); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(onDisk, inForce) {
		t.Errorf("after the rejection the file is\n%s\nwant what is in force\n%s", onDisk, inForce)
	}
	if p := d.PendingChange(); p != nil {
		t.Errorf("pending after rejection: %+v", p)
	}
	if got := pol("read"); got != config.PolicyApprove {
		t.Errorf("read %s after rejection, want approve", got)
	}

	// The person's edit widens at once.
	if _, err := d.EditConfig("test", func(c *config.Config) error {
		c.Servers["srv"].Tools["read"] = config.ToolPolicy{Policy: config.PolicyAllow}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := pol("read"); got != config.PolicyAllow {
		t.Errorf("read %s after EditConfig, want allow", got)
	}
	if p := d.PendingChange(); p != nil {
		t.Errorf("the daemon's own write is held: %+v", p)
	}

	// A held change edited again before a decision is replaced: the first
	// id no longer confirms anything.
	savePolicies(t, path, map[string]string{"read": "allow", "write": "allow"})
	first := d.PendingChange()
	savePolicies(t, path, map[string]string{"read": "allow", "write": "allow", "x": "allow"})
	second := d.PendingChange()
	if first == nil || second == nil || first.ID == second.ID {
		t.Fatalf("pending %+v then %+v, want two different changes", first, second)
	}
	if err := d.DecideChange(first.ID, true, "test"); !errors.Is(err, ErrNoChange) {
		t.Errorf("confirming the replaced change: %v, want ErrNoChange", err)
	}
	if got := pol("x"); got != config.PolicyApprove {
		t.Errorf("x %s, want approve", got)
	}
	if err := d.DecideChange(second.ID, true, "test"); err != nil {
		t.Fatal(err)
	}
	if got := pol("x"); got != config.PolicyAllow {
		t.Errorf("x %s after confirmation, want allow", got)
	}
}
