package gateway

import (
	"time"

	"github.com/portcullis/portcullis/core/authz"
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
