package daemon

import (
	"context"
	"errors"
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
	// onHealth, when set, is called (without locks held) when appends
	// start failing and when they work again, so that the person is told
	// (status, tray) while calls are refused with audit_unavailable.
	onHealth func()

	mu     sync.Mutex
	last   time.Time // guarded by mu; last recovery attempt
	failed bool      // guarded by mu; the last append failed
}

// Append writes one event durably, trying to recover a failed log first.
func (r *recovering) Append(ctx context.Context, typ string, fields any) (audit.Event, error) {
	ev, err := r.append(ctx, typ, fields)
	failed := err != nil && errors.Is(err, audit.ErrUnavailable)
	r.mu.Lock()
	changed := failed != r.failed && (failed || err == nil)
	if changed {
		r.failed = failed
	}
	r.mu.Unlock()
	if changed && r.onHealth != nil {
		r.onHealth()
	}
	return ev, err
}

// Err reports why the log cannot be written now (after trying to recover
// it, at most once per retryEvery), or nil: the gateway asks before it
// raises an approval request, so that nobody is asked to approve what
// could not be recorded.
func (r *recovering) Err() error {
	if r == nil || r.log.Err() == nil {
		return nil
	}
	r.tryRecover(context.Background())
	return r.log.Err()
}

// tryRecover tries audit.Log.Recover, at most once per retryEvery.
func (r *recovering) tryRecover(ctx context.Context) {
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

func (r *recovering) append(ctx context.Context, typ string, fields any) (audit.Event, error) {
	if r.log.Err() != nil {
		r.tryRecover(ctx)
	}
	return r.log.Append(ctx, typ, fields)
}
