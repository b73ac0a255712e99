package gateway

import (
	"errors"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
)

// ErrCredentialUnavailable is wrapped by a Launcher's error when a
// credential the process needs at launch cannot be had (nothing stored, a
// locked keychain): requests are then refused as credential_unavailable, not
// server_unavailable, so that the agent can tell the person what to fix.
var ErrCredentialUnavailable = errors.New(string(control.CredentialUnavailable))

// launchRefusal names the refusal of a first launch that failed with err:
// a credential that cannot be had, an audit log that cannot record the
// launch's approval, an approval of the launch denied or timed out, and
// otherwise server_unavailable.
func launchRefusal(err error) control.Reason {
	switch {
	case errors.Is(err, ErrCredentialUnavailable):
		return control.CredentialUnavailable
	case errors.Is(err, audit.ErrUnavailable):
		return control.AuditUnavailable
	case errors.Is(err, authz.ErrTimeout):
		return control.ApprovalTimeout
	case errors.Is(err, authz.ErrDenied):
		return control.ApprovalDenied
	}
	return control.ServerUnavailable
}
