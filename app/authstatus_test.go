package app

import (
	"testing"

	"github.com/portcullis/portcullis/core/daemon"
)

// TestAuthLine: status says first whether approvals are OS-authenticated,
// the mode in force and why not, then what it means and the note with the
// step that fixes it.
func TestAuthLine(t *testing.T) {
	for _, tc := range []struct {
		st   daemon.AuthStatus
		want string
	}{
		{daemon.AuthStatus{Mode: "cli", Mechanism: "polkit", Available: true, OSAuthenticated: true, Meaning: "M."},
			"Approval authentication: cli (the default), OS-authenticated by polkit\n  M."},
		{daemon.AuthStatus{Setting: "credentials", Mode: "credentials", Mechanism: "polkit", Available: true, OSAuthenticated: true, Meaning: "M."},
			"Approval authentication: credentials, OS-authenticated by polkit\n  M."},
		{daemon.AuthStatus{Setting: "always", Mode: "always", Mechanism: "polkit", Reason: daemon.AuthReasonNotRunning, Meaning: "M.", Note: "settings.approvalAuthentication is \"always\" but the system cannot authenticate you (no polkitd): such approvals are refused until it can"},
			"Approval authentication: always, NOT OS-authenticated: polkit is not running\n  M.\n  settings.approvalAuthentication is \"always\" but the system cannot authenticate you (no polkitd): such approvals are refused until it can"},
		{daemon.AuthStatus{Mode: "off", Mechanism: "polkit", Reason: daemon.AuthReasonNoAction, Meaning: "M.", Note: "N"},
			"Approval authentication: off (the default), NOT OS-authenticated: polkit's action dev.portcullis.approve is not installed\n  M.\n  N"},
		{daemon.AuthStatus{Mode: "off", Mechanism: "polkit", Reason: daemon.AuthReasonRoot, Meaning: "M.", Note: "N"},
			"Approval authentication: off (the default), NOT OS-authenticated: the daemon runs as root\n  M.\n  N"},
		{daemon.AuthStatus{Setting: "off", Mode: "off", Mechanism: "polkit", Available: true, Reason: daemon.AuthReasonOff, Meaning: "M."},
			"Approval authentication: off, NOT OS-authenticated (settings.approvalAuthentication is off)\n  M."},
	} {
		if got := authLine(tc.st); got != tc.want {
			t.Errorf("authLine(%+v) =\n%q\nwant\n%q", tc.st, got, tc.want)
		}
	}
}
