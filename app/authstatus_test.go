package app

import (
	"testing"

	"github.com/portcullis/portcullis/core/daemon"
)

func TestAuthLine(t *testing.T) {
	for _, tc := range []struct {
		st   daemon.AuthStatus
		want string
	}{
		{daemon.AuthStatus{Mode: "credentials", Mechanism: "polkit", Available: true},
			"Approval authentication: credentials (approvals that carry a credential ask polkit to authenticate you)"},
		{daemon.AuthStatus{Setting: "always", Mode: "always", Mechanism: "polkit", Note: "settings.approvalAuthentication is \"always\" but the system cannot authenticate you (no polkitd): such approvals are refused until it can"},
			"Approval authentication: always (every approval asks polkit to authenticate you)\n  settings.approvalAuthentication is \"always\" but the system cannot authenticate you (no polkitd): such approvals are refused until it can"},
		{daemon.AuthStatus{Mode: "off", Note: "settings.approvalAuthentication is not set and the system cannot authenticate you (x): approvals need no OS authentication"},
			"Approval authentication: off\n  settings.approvalAuthentication is not set and the system cannot authenticate you (x): approvals need no OS authentication"},
		{daemon.AuthStatus{Setting: "off", Mode: "off", Mechanism: "polkit", Available: true}, "Approval authentication: off"},
	} {
		if got := authLine(tc.st); got != tc.want {
			t.Errorf("authLine(%+v) =\n%q\nwant\n%q", tc.st, got, tc.want)
		}
	}
}
