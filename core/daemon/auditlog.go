package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/portcullis/portcullis/core/audit"
)

// recovering is the daemon's audit log as the gateways use it: after a
// write failure (disk full, I/O error) the log fails closed, and this wrapper
// tries audit.Log.Recover before an append, at most once per retryEvery, so
// that calls work again once the disk has room — without ever forwarding a
// call whose intent was not written.
type recovering struct {
	log        *audit.Log
	retryEvery time.Duration

	mu   sync.Mutex
	last time.Time // guarded by mu; last recovery attempt
}

// Append writes one event durably, trying to recover a failed log first.
func (r *recovering) Append(ctx context.Context, typ string, fields any) (audit.Event, error) {
	if r.log.Err() != nil {
		r.mu.Lock()
		try := time.Since(r.last) >= r.retryEvery
		if try {
			r.last = time.Now()
		}
		r.mu.Unlock()
		if try {
			_ = r.log.Recover(ctx)
		}
	}
	return r.log.Append(ctx, typ, fields)
}
