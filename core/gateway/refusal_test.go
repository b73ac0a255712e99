package gateway

import (
	"errors"
	"fmt"
	"testing"

	"github.com/portcullis/portcullis/core/audit"
	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
	"github.com/portcullis/portcullis/core/identity"
)

// TestLaunchRefusal: a first launch that failed names its refusal by cause,
// through any wrapping: the agent learns whether to ask for a credential,
// respect a person's "no", or report a broken server.
func TestLaunchRefusal(t *testing.T) {
	tests := []struct {
		err  error
		want control.Reason
	}{
		{fmt.Errorf("%w: credential scope \"api\" cannot be read", ErrCredentialUnavailable), control.CredentialUnavailable},
		{fmt.Errorf("credentials api were not approved for this build (%w)", authz.ErrDenied), control.ApprovalDenied},
		{fmt.Errorf("credentials api were not approved (%w)", authz.ErrWithdrawn), control.ApprovalDenied},
		{fmt.Errorf("credentials api were not approved (%w)", authz.ErrTimeout), control.ApprovalTimeout},
		{fmt.Errorf("launch: %w", identity.ErrCommandNotFound), control.ServerUnavailable},
		{fmt.Errorf("notes was not launched: its credentials need an approval, and %w", audit.ErrUnavailable), control.AuditUnavailable},
		{errors.New("exec format error"), control.ServerUnavailable},
	}
	for _, tt := range tests {
		if got := launchRefusal(tt.err); got != tt.want {
			t.Errorf("launchRefusal(%v) = %s, want %s", tt.err, got, tt.want)
		}
	}
}
