package gateway

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/portcullis/portcullis/core/authz"
	"github.com/portcullis/portcullis/core/control"
)

// pendingWhere returns the first pending approval request that ok accepts,
// waiting up to d for the authority to raise one (told by its events, no
// polling).
func (r *rig) pendingWhere(d time.Duration, ok func(authz.Request) bool) authz.Request {
	r.t.Helper()
	events, cancel := r.auth.Subscribe()
	defer cancel()
	timeout := time.After(d)
	for {
		for _, q := range r.auth.Pending() {
			if ok(q) {
				return q
			}
		}
		select {
		case <-events:
		case <-timeout:
			r.t.Fatalf("no matching approval request within %s; pending: %+v", d, r.auth.Pending())
		}
	}
}

// TestEndedEpochWithdrawsItsApprovalRequest: a call waits for a person on
// E1; the server is replaced. Its card is withdrawn at once, the call is
// answered epoch_ended (not sent), the run's status says which request was
// withdrawn and why, and approving the request afterwards grants nothing.
func TestEndedEpochWithdrawsItsApprovalRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		defer r.close()
		r.handshake()
		r.agent.request(1, "tools/list", nil)
		r.agent.wait(1, 5*time.Second)
		r.agent.request(2, "tools/call", callParams(toolWrite, 2, ""))
		req := r.pendingFor(5 * time.Second)
		if req.Card.CurrentEpoch != "E1" {
			t.Fatalf("card epoch %q, want E1", req.Card.CurrentEpoch)
		}
		r.sess.Replace("rebuild")
		_, ref := refusal(t, r.agent.wait(2, 5*time.Second))
		if ref == nil || ref.Error != control.EpochEnded {
			t.Fatalf("the waiting call: refusal %+v, want epoch_ended", ref)
		}
		// Withdrawn by the time the call is answered.
		if p := r.auth.Pending(); len(p) != 0 {
			t.Fatalf("pending after the epoch ended: %+v, want none", p)
		}
		st := r.sess.Status()
		if len(st.Withdrawn) != 1 || st.Withdrawn[0].Request != req.ID || !strings.Contains(st.Withdrawn[0].Reason, "replaced") ||
			!strings.Contains(st.Withdrawn[0].Reason, "E1") {
			t.Errorf("status withdrawn = %+v, want %s with the reason (replaced, E1)", st.Withdrawn, req.ID)
		}
		err := r.auth.Decide(req.ID, authz.Decision{Choice: authz.ApproveRun, By: "cli"})
		var re *authz.ResolvedError
		if !errors.As(err, &re) || re.Outcome != "withdrawn" || !strings.Contains(err.Error(), "replaced") {
			t.Errorf("approving the withdrawn request: %v, want it withdrawn, saying why", err)
		}
		if g := r.auth.Grants("RUN"); len(g) != 0 {
			t.Errorf("grants %+v, want none", g)
		}
		if got := r.launcher.received(); len(got) != 0 {
			t.Errorf("the servers received %+v, want nothing", got)
		}
	})
}
